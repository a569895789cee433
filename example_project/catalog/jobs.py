"""Catalogue jobs, run by durable schedules (see DURABLE_JOBS["SCHEDULES"] in settings)."""

from __future__ import annotations

from durable_jobs import JobContext, job


@job(name="catalog.ott_release_refresh", queue="imports", takes_context=True)
def ott_release_refresh(
    context: JobContext, countries: list[str], release_window: str, requested_horizon: int
) -> dict[str, object]:
    """Refresh streaming releases. Here it only reports what the schedule handed it."""
    context.logger.info(
        "refreshing %s releases for %s, %s days ahead (schedule %s, due %s, key %s)",
        release_window,
        ", ".join(countries),
        requested_horizon,
        context.schedule_id,
        context.scheduled_run_at.isoformat() if context.scheduled_run_at else "now",
        context.idempotency_key,
    )
    return {"countries": countries, "window": release_window, "horizon": requested_horizon}


@job(name="catalog.price_snapshot", queue="imports")
def price_snapshot() -> None:
    """A frequent schedule, so the demo shows the heartbeat at work."""
