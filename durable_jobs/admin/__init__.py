"""The Django admin as the jobs dashboard: jobs and their attempts, queues, batches,
nodes and schedules.

Everything is read-only: state changes happen only through actions that go through
the state machine (:mod:`durable_jobs.actions`, :class:`~durable_jobs.Scheduler`),
and those need the change permission.
"""

from durable_jobs.admin.batches import BatchAdmin
from durable_jobs.admin.jobs import JobAdmin
from durable_jobs.admin.nodes import NodeAdmin
from durable_jobs.admin.overview import OverviewAdmin
from durable_jobs.admin.queues import QueueAdmin
from durable_jobs.admin.schedules import ScheduleAdmin

__all__ = ["BatchAdmin", "JobAdmin", "NodeAdmin", "OverviewAdmin", "QueueAdmin", "ScheduleAdmin"]
