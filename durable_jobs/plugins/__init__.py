"""Periodic work a worker does besides running jobs: heartbeat, rescue, pruning,
finishing batches, and the schedule heartbeat.

Each plugin is a :class:`~durable_jobs.plugins.base.Plugin`; the worker's loop
calls ``run`` when its interval has passed.
"""

from durable_jobs.plugins.base import Plugin
from durable_jobs.plugins.batches import BatchSweeper
from durable_jobs.plugins.heartbeat import Heartbeat
from durable_jobs.plugins.pruner import Pruner
from durable_jobs.plugins.rescuer import Rescuer
from durable_jobs.plugins.scheduler import SchedulerPlugin

__all__ = [
    "BatchSweeper",
    "Heartbeat",
    "Plugin",
    "Pruner",
    "Rescuer",
    "SchedulerPlugin",
    "default_plugins",
]


def default_plugins(*, scheduler: bool = True) -> list[Plugin]:
    plugins: list[Plugin] = [Heartbeat(), Rescuer(), Pruner(), BatchSweeper()]
    if scheduler:
        plugins.append(SchedulerPlugin())
    return plugins
