"""The former name of :mod:`durable_jobs.schedules.tick`, kept for the documented path."""

from durable_jobs.schedules.tick import TickResult, occurrence_key, tick

__all__ = ["TickResult", "occurrence_key", "tick"]
