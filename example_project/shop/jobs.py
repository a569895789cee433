"""The shop's job handlers. durable_jobs imports every installed app's ``jobs.py`` at startup.

A handler's name (``shop.jobs.send_receipt`` for the first one) is what gets stored
with each job, so keep it stable or fix it with ``@job(name=...)``.
"""

from __future__ import annotations

import logging

from durable_jobs import JobContext, job

logger = logging.getLogger(__name__)


@job(queue="emails")
def send_receipt(order_id: int) -> None:
    """A quick job: runs once and completes."""
    logger.info("receipt for order %s sent", order_id)


@job(takes_context=True, max_retries=5, backoff=[0.5])
def charge_card(context: JobContext, order_id: int, amount_cents: int) -> dict[str, int]:
    """Fails on its first two attempts (a flaky payment gateway), then succeeds.

    ``backoff=[0.5]`` retries after half a second each time (the last delay of the
    list repeats); the default is exponential (15 s, 30 s, 60 s, ... plus jitter).
    """
    if context.attempt <= 2:
        raise ConnectionError(f"payment gateway timed out (attempt {context.attempt})")
    context.logger.info("charged %s cents for order %s", amount_cents, order_id)
    return {"order_id": order_id, "charged_cents": amount_cents}  # stored as Job.result


@job(max_retries=2, backoff=[0.5])
def sync_inventory(sku: str) -> None:
    """Always fails: after 1 + max_retries attempts the job ends ``dead``."""
    raise LookupError(f"the warehouse has no product with SKU {sku!r}")


@job
def release_reservation(order_id: int) -> None:
    """Enqueued with ``.using(run_in=...)``: it waits before it becomes available."""
    logger.info("stock reserved for unpaid order %s released", order_id)
