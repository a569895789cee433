"""Masking secret-looking values before a payload is shown or logged."""

from __future__ import annotations

from typing import Any

from durable_jobs.conf import get_settings

MASK = "********"


def is_secret_key(key: str, keys: tuple[str, ...] | None = None) -> bool:
    if keys is None:
        keys = get_settings().redact_keys
    lowered = key.lower()
    return any(part in lowered for part in keys)


def redact(value: Any, keys: tuple[str, ...] | None = None) -> Any:
    """A copy of ``value`` with the values of secret-looking keys masked, at any depth."""
    if keys is None:
        keys = get_settings().redact_keys
    if isinstance(value, dict):
        return {
            k: (MASK if isinstance(k, str) and is_secret_key(k, keys) else redact(v, keys))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v, keys) for v in value]
    return value
