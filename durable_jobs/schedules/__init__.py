"""Durable schedules: cron, interval and one-off schedules stored as rows.

The heartbeat (:mod:`.heartbeat`) only ever enqueues jobs; workers run them. Each
occurrence's job carries the idempotency key ``schedule:<id>:<UTC ISO time>``, so
any number of heartbeats on any number of nodes create one job per occurrence.
"""
