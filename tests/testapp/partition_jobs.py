"""Handlers for the fault tests: network partition, SQLite contention, the scheduler."""

from __future__ import annotations
