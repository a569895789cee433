"""Durable schedules: cron, interval and one-off schedules stored as rows.

The tick (:mod:`.tick`, the scheduler heartbeat) only ever enqueues jobs; workers run
them. Each occurrence's job carries the idempotency key ``schedule:<id>:<UTC ISO
time>``, so any number of ticks on any number of nodes create one job per occurrence.
Public: :mod:`~durable_jobs.schedules.scheduler`, :mod:`~durable_jobs.schedules.sync`
and :mod:`~durable_jobs.schedules.expressions`' errors; the others are internal.
"""
