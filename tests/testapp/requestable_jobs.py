"""Handlers that HTTP clients may request (the client boundary tests)."""

from __future__ import annotations
