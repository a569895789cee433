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


@job(name="catalog.import_price_row", queue="partners", max_retries=0)
def import_price_row(sku: str, cents: int) -> None:
    """One row of a partner price feed. The ``partners`` queue is rate-limited in settings
    (at most 4 starts a second across every worker): the partner's API would refuse more."""
    if cents <= 0:
        raise ValueError(f"the feed has no valid price for {sku!r}")


@job(name="catalog.price_import_finished", takes_context=True)
def price_import_finished(context: JobContext, feed: str) -> dict[str, object]:
    """Runs once, when every row of the batch is final; reports the batch's counts."""
    batch = context.batch
    assert batch is not None
    context.logger.info(
        "price feed %s imported: %s rows completed, %s failed", feed, batch.completed, batch.dead
    )
    return {"feed": feed, "counts": batch.counts}
