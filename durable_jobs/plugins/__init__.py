"""Periodic work a worker does besides running jobs: heartbeat, rescue, pruning.

Each plugin is a :class:`~durable_jobs.plugins.base.Plugin`; the worker's loop
calls ``run`` when its interval has passed.
"""

from durable_jobs.plugins.base import Plugin
from durable_jobs.plugins.heartbeat import Heartbeat
from durable_jobs.plugins.pruner import Pruner
from durable_jobs.plugins.rescuer import Rescuer

__all__ = ["Heartbeat", "Plugin", "Pruner", "Rescuer", "default_plugins"]


def default_plugins() -> list[Plugin]:
    return [Heartbeat(), Rescuer(), Pruner()]
