"""Recent windows over large tables, each read with a bounded cost.

A figure over "the last 24 hours" reads every row of those hours, however many there
are. A :class:`Window` bounds that: when the range holds more than ``cap`` rows it is
narrowed to the newest ``cap`` of them, found with one read of the ``(cap + 1)``-th
newest entry of an index on the window's field, and it says so (``since`` moves,
``capped`` is true) so that the page can say what it counted.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from durable_jobs.serializers import iso

#: The most index entries one figure reads.
CAP = 100_000


@dataclass(frozen=True)
class Window:
    """A recent time window over rows ordered by ``field``, narrowed to the newest ``cap``."""

    field: str
    since: datetime.datetime
    capped: bool

    @classmethod
    def newest(
        cls, rows: QuerySet[Any], field: str, since: datetime.datetime, cap: int = CAP
    ) -> Window:
        # The (cap + 1)-th newest row, read through the index in descending order: when
        # it exists, the window starts just after it and holds at most ``cap`` rows.
        beyond = (
            rows.filter(**{f"{field}__gte": since})
            .order_by(f"-{field}")
            .values_list(field, flat=True)[cap : cap + 1]
        )
        boundary = next(iter(beyond), None)
        if boundary is None:
            return cls(field, since, capped=False)
        return cls(field, boundary, capped=True)

    def rows(self, rows: QuerySet[Any]) -> QuerySet[Any]:
        lookup = "gt" if self.capped else "gte"
        return rows.filter(**{f"{self.field}__{lookup}": self.since})

    def as_dict(self) -> dict[str, Any]:
        return {"since": iso(self.since), "capped": self.capped}
