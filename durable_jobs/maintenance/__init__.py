"""The periodic services every worker runs beside its jobs: rescue, pruning, the batch
sweeper and the schedule tick (see :mod:`durable_jobs.maintenance.base`). Internal."""

from __future__ import annotations

from durable_jobs.maintenance.base import MaintenanceContext, MaintenanceRunner, Service
from durable_jobs.maintenance.batch_sweeper import BatchSweeper
from durable_jobs.maintenance.pruner import Pruner
from durable_jobs.maintenance.rescuer import Rescuer
from durable_jobs.maintenance.schedule_tick import ScheduleTick

__all__ = [
    "BatchSweeper",
    "MaintenanceContext",
    "MaintenanceRunner",
    "Pruner",
    "Rescuer",
    "ScheduleTick",
    "Service",
    "default_services",
]


def default_services(*, schedules: bool = True) -> list[Service]:
    services: list[Service] = [Rescuer(), Pruner(), BatchSweeper()]
    if schedules:
        services.append(ScheduleTick())
    return services
