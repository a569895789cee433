"""The job state machine: the six states, the allowed moves, and the writer operators use.

The public face of :mod:`durable_jobs.lifecycle`: :class:`State`,
:data:`ALLOWED_SOURCES` and :func:`transition` (guarded UPDATEs, for operator actions)
are documented here; the claim and the outcome write live beside them in
:mod:`durable_jobs.lifecycle.transitions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable_jobs.lifecycle.states import (
    ALLOWED_SOURCES,
    CLAIMABLE,
    FINAL,
    UNFINISHED,
    State,
    can_move,
)

if TYPE_CHECKING:
    from durable_jobs.lifecycle.transitions import claim, transition

__all__ = [
    "ALLOWED_SOURCES",
    "CLAIMABLE",
    "FINAL",
    "UNFINISHED",
    "State",
    "can_move",
    "claim",
    "transition",
]


def __getattr__(name: str) -> Any:
    # The writers use the models, which wait for Django's app registry; the vocabulary
    # above is importable at any time (from settings, or a models module).
    if name in ("claim", "transition"):
        from durable_jobs.lifecycle import transitions

        return getattr(transitions, name)
    raise AttributeError(f"module 'durable_jobs.states' has no attribute {name!r}")
