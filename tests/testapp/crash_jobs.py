"""Handlers for the fault tests: worker crashes, graceful deploys, database restarts."""

from __future__ import annotations
