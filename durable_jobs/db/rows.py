"""Model instances for rows: built from a result row, or for an insert, without ``__init__``.

``Model.__init__`` does per-field work (descriptors, defaults, signals) that a row just
read, or one about to be inserted with every field given, does not need, and a worker
builds a Job for every job it claims and an Attempt for every attempt. Without
``pre_init``/``post_init`` receivers for the model, the attributes are set directly,
as ``__init__`` would leave them; with receivers, the model's own constructors run so
that the receivers see every instance.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from django.db import connections, models
from django.db.models import signals as model_signals
from django.db.models.base import ModelState

M = TypeVar("M", bound=models.Model)


def _has_init_receivers(model: type[models.Model]) -> bool:
    return model_signals.pre_init.has_listeners(model) or model_signals.post_init.has_listeners(
        model
    )


def from_row(model: type[M], attnames: Sequence[str], values: Sequence[Any], alias: str) -> M:
    """``model.from_db(alias, attnames, values)`` for a full row of field values."""
    if _has_init_receivers(model):
        return model.from_db(alias, attnames, values)
    instance = model.__new__(model)
    instance.__dict__.update(zip(attnames, values, strict=True))
    state = ModelState()
    state.adding, state.db = False, alias
    instance._state = state
    return instance


def new_instance(model: type[M], **values: Any) -> M:
    """``model(**values)``, for a row about to be inserted; fields not given take their
    defaults."""
    if _has_init_receivers(model):
        return model(**values)
    fixed, made, names = _defaults(model)
    if not names.issuperset(values):
        raise TypeError(f"{model.__name__} has no fields {sorted(set(values) - names)}")
    instance = model.__new__(model)
    fields = instance.__dict__
    fields.update(fixed)
    fields.update(values)
    for name, make in made:
        if name not in values:
            fields[name] = make()
    instance._state = ModelState()
    return instance


def instance_maker(model: type[M], given: Iterable[str]) -> Callable[[dict[str, Any]], M]:
    """:func:`new_instance` for many rows that give the same fields (``given``): what
    does not change from row to row (the receivers, the field names, the defaults of
    the fields not given) is worked out once. The maker takes each row's values as a
    dict, which it may keep."""
    if _has_init_receivers(model):
        return lambda values: model(**values)
    fixed, made, names = _defaults(model)
    given = frozenset(given)
    if not names.issuperset(given):
        raise TypeError(f"{model.__name__} has no fields {sorted(given - names)}")
    fixed = {name: value for name, value in fixed.items() if name not in given}
    made = tuple((name, make) for name, make in made if name not in given)
    new = model.__new__

    def make_instance(values: dict[str, Any]) -> M:
        instance = new(model)
        fields = instance.__dict__
        fields.update(fixed)
        fields.update(values)
        for name, make in made:
            fields[name] = make()
        instance._state = ModelState()
        return instance

    return make_instance


@functools.cache
def _defaults(
    model: type[models.Model],
) -> tuple[dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...], frozenset[str]]:
    """The model's field defaults for :func:`new_instance`: those that are one immutable
    value, taken as they are, and those made anew for each row (a callable such as
    ``timezone.now`` or ``dict``, or a value that could be mutated); and the field names."""
    fixed: dict[str, Any] = {}
    made: list[tuple[str, Callable[[], Any]]] = []
    for field in model._meta.concrete_fields:
        if field.has_default() and callable(field.default):
            made.append((field.attname, field.get_default))
            continue
        value = field.get_default()
        if _immutable(value):
            fixed[field.attname] = value
        else:
            made.append((field.attname, field.get_default))
    names = frozenset(field.attname for field in model._meta.concrete_fields)
    return fixed, tuple(made), names


def _immutable(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def mark_saved(instance: models.Model, pk: int, alias: str) -> None:
    """Record that ``instance`` was inserted as ``pk`` by a statement of our own."""
    instance.pk = pk
    instance._state.adding = False
    instance._state.db = alias


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """How to build a model instance from a row of one result layout."""

    #: Per field, in field order (as ``Model.from_db`` takes them): its row position.
    order: list[int]
    #: ``(field position, converter)`` of the fields that have database converters.
    converters: list[tuple[int, Callable[..., Any]]]
    attnames: tuple[str, ...]


@functools.lru_cache(maxsize=32)
def row_plan(model: type[models.Model], alias: str, layout: tuple[str, ...]) -> RowPlan:
    """The :class:`RowPlan` of a result's column names (the same for every connection of
    ``alias``)."""
    connection = connections[alias]
    position = {name: i for i, name in enumerate(layout)}
    fields = model._meta.concrete_fields
    converters = []
    for i, field in enumerate(fields):
        found = connection.ops.get_db_converters(field.cached_col)
        found += field.get_db_converters(connection)
        converters += [(i, convert) for convert in found]
    return RowPlan(
        order=[position[str(field.column)] for field in fields],
        converters=converters,
        attnames=tuple(field.attname for field in fields),
    )


def instances(
    model: type[M], alias: str, layout: tuple[str, ...], rows: Sequence[Sequence[Any]]
) -> list[M]:
    """An instance of ``model`` per row of a result with the column names ``layout`` (all
    of the model's columns, in any order).

    What ``Model.objects.raw()`` does, without its per-row bookkeeping: the columns are
    matched to fields once per layout, and only the fields that need it (JSON) are
    converted. A claim builds every job it leases, so this is on the hot path.
    """
    plan = row_plan(model, alias, layout)
    connection = connections[alias]
    out = []
    for row in rows:
        values = [row[i] for i in plan.order]
        for i, convert in plan.converters:
            values[i] = convert(values[i], None, connection)
        out.append(from_row(model, plan.attnames, values, alias))
    return out
