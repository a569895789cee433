"""Job list filters whose choices cost nothing at scale, and a capped paginator.

Django's default filter for a plain column lists its values with ``SELECT DISTINCT``
over the whole table, and its paginator counts every matching row: both read a
million rows per page view. Here the choices come from settings, the queue table and
the handler registry, and the count stops at a cap.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib import admin
from django.core.exceptions import BadRequest, FieldDoesNotExist
from django.core.paginator import Paginator
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.functional import cached_property
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from durable_jobs import overview
from durable_jobs.flow.queues import declared
from durable_jobs.models import FAILED_OUTCOMES, Attempt, Job
from durable_jobs.registry import all_handlers
from durable_jobs.validate import text_problem

#: Lookups a URL may not use: a hand-written ``?name__regex=(`` is an invalid regular
#: expression to the database, a server error rather than an empty list.
_UNSAFE_LOOKUPS = frozenset({"regex", "iregex"})


class SafeLookupsMixin:
    """Refuses (Django answers 400) URL lookups that would make the list's query fail.

    Django lets any ``?field__lookup=value`` of the model's own fields through to the
    query. Some fail in the database instead of matching nothing: NUL text (PostgreSQL),
    lookups into JSON columns (``?payload__contains=``: SQLite has no such lookup),
    regular expressions, and times that overflow when converted to UTC (SQLite).
    """

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        model: Any = getattr(self, "model", None)
        parts = lookup.split("__")
        if text_problem(value) or parts[-1] in _UNSAFE_LOOKUPS:
            return False
        try:
            field = model._meta.get_field(parts[0])
        except FieldDoesNotExist:  # Django answers ?e=1 for it, or a list filter uses it
            field = None
        if isinstance(field, models.JSONField):
            return False
        if isinstance(field, models.DateTimeField):
            try:
                moment = parse_datetime(value)
                if moment is not None:
                    if timezone.is_naive(moment):
                        moment = timezone.make_aware(moment)
                    moment.astimezone(datetime.UTC)  # as the query will
            except (ValueError, OverflowError):
                return False
        return super().lookup_allowed(lookup, value, request)  # type: ignore[misc]


class QueueFilter(admin.SimpleListFilter):
    """Queues of the settings, the queue table and the nodes; any other still filters."""

    title = _("queue")
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = set(declared())
        if self.value():
            names.add(str(self.value()))
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(queue=self.value()) if self.value() else queryset


class NameFilter(admin.SimpleListFilter):
    """Handlers registered in this process; any other name still filters from the URL."""

    title = _("handler")
    parameter_name = "name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = set(all_handlers())
        if self.value():
            names.add(str(self.value()))
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(name=self.value()) if self.value() else queryset


class ErrorFilter(admin.SimpleListFilter):
    """Jobs that failed with the same error as an attempt (the overview's error groups).

    Shown only while active: its one choice is the error being filtered on. A value that
    is no attempt id at all is refused (400); the id of an attempt that has gone since,
    or did not fail, matches no job.
    """

    title = _("error")
    parameter_name = "error"

    def attempt_id(self) -> int:
        """The filter's value as an attempt id, or BadRequest when it cannot be one."""
        text = str(self.value() or "")
        # isdecimal, not isdigit: int() refuses digits such as "²". At most 19 digits and
        # below 2**63: a larger number is no id the database can hold (and int() refuses
        # strings of thousands of digits).
        if text.isascii() and text.isdecimal() and len(text) <= 19 and int(text) < 2**63:
            return int(text)
        raise BadRequest(
            f"?{self.parameter_name}= takes the id of an attempt (a whole number below 2**63)"
            f", not {text[:40]!r}."
        )

    def example(self) -> Attempt | None:
        return Attempt.objects.filter(pk=self.attempt_id(), outcome__in=FAILED_OUTCOMES).first()

    def has_output(self) -> bool:
        # Shown (and applied) whenever the parameter is given, even when its attempt has
        # gone or did not fail: the list must then be empty, not everything.
        return bool(self.value())

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        if not self.value():
            return []
        attempt = self.example()
        if attempt is None:
            return [(str(self.value()), gettext("an error no longer recorded"))]
        return [
            (
                str(attempt.pk),
                f"{attempt.error_class}: {overview.root_cause(attempt.error_message)}"[:120],
            )
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if not self.value():
            return queryset
        attempt = self.example()
        if attempt is None:
            return queryset.none()
        return queryset.filter(pk__in=overview.jobs_with_error(attempt).values("pk"))


class CappedPaginator(Paginator):
    """Counts at most ``cap`` + 1 rows; past that, pages run to the cap and the list says so."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if isinstance(rows, QuerySet):
            # Unordered: ordering by id would walk the primary key instead of the
            # filter's index.
            return rows.order_by()[: self.cap + 1].count()
        return len(rows)

    @property
    def capped(self) -> bool:
        return self.count > self.cap
