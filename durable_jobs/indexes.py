"""A partial index that MySQL's system check does not warn about.

Django warns ``models.W037`` ("does not support indexes with conditions") for every
model with a partial index, on every command that runs the system checks once Django
6.1 checks models against every database. On MySQL and MariaDB durable_jobs replaces
those indexes itself (migration 0011), so the warning would only be noise.
:class:`PartialIndex` keeps its condition out of ``Index.condition``, which is what the
check reads, and puts it back wherever the index is built or compared: ``deconstruct``
gives exactly what the ``models.Index(..., condition=...)`` it stands for gives, and
compares equal to it (so migrations see no change); ``create_sql`` builds that index.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q


class PartialIndex(models.Index):
    def __init__(self, *expressions: Any, condition: Q, **kwargs: Any) -> None:
        super().__init__(*expressions, condition=condition, **kwargs)
        self.partial_condition = condition
        self.condition = None

    def deconstruct(self) -> Any:
        _, args, kwargs = super().deconstruct()
        return "django.db.models.Index", args, {**kwargs, "condition": self.partial_condition}

    def clone(self) -> PartialIndex:
        _, args, kwargs = self.deconstruct()
        return PartialIndex(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        # Equal to the plain index it stands for: the migration autodetector compares the
        # model's indexes with those of the migrations.
        if isinstance(other, models.Index):
            return bool(self.deconstruct() == other.deconstruct())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # as models.Index: equal, yet mutable

    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        _, args, index_kwargs = self.deconstruct()
        return models.Index(*args, **index_kwargs).create_sql(
            model, schema_editor, using=using, **kwargs
        )
