"""The bounds every input is held to, each defined once.

Text lengths are the columns' own, read from the models when first asked (after
Django's app registry is ready), so a migration that widens a column widens the check.
Numbers are what the database columns and the workers' datetime arithmetic can hold.
"""

from __future__ import annotations

import functools

from django.apps import apps

#: A PositiveIntegerField on PostgreSQL (``integer``): retries, limits, counters.
INT32_MAX = 2**31 - 1
#: A BigAutoField: job, attempt and batch ids.
BIGINT_MAX = 2**63 - 1
#: The longest delay, lease, interval or grace period (a year). Workers add these to the
#: current time; ``inf``, NaN or a huge number would overflow there, in the worker's loop.
MAX_SECONDS = 365 * 86400.0
#: The longest PRUNE_AFTER_DAYS (a century).
MAX_PRUNE_DAYS = 36500
#: Job priorities, as in Django's tasks: higher runs first.
PRIORITY_MIN, PRIORITY_MAX = -100, 100


@functools.cache
def length(model: str, field: str) -> int:
    """The ``max_length`` of ``field`` of the durable_jobs model ``model`` (``"Job"``)."""
    max_length = apps.get_model("durable_jobs", model)._meta.get_field(field).max_length
    assert max_length is not None, (model, field)
    return int(max_length)
