"""Masking secret-looking values before a payload, a result or metadata is shown or logged.

A key is secret-looking when, lowercased and with its separators removed (``-``, ``_``,
``.``, spaces: so ``X-Api-Key``, ``x_api_key`` and ``xApiKey`` read alike), it contains
one of :data:`SECRET_WORDS` or of ``DURABLE_JOBS["REDACT_KEYS"]``. The words include all
of those Django's ``SafeExceptionReporterFilter`` hides. The values under such keys are
masked at any depth, and so is the value of each ``[name, value]`` pair, in a list of
such pairs, whose name is one (headers: ``[["Authorization", "Bearer ..."]]``). Error messages and
tracebacks are stored and shown as they were raised: they are not redacted.
"""

from __future__ import annotations

import re
from typing import Any

from durable_jobs.conf import get_settings

MASK = "********"

#: Always masked: Django's words (API, AUTH, TOKEN, KEY, SECRET, PASS, SIGNATURE), and
#: other common names of credentials.
SECRET_WORDS: tuple[str, ...] = (
    "api",
    "auth",
    "token",
    "key",
    "secret",
    "pass",
    "signature",
    "pwd",
    "bearer",
    "jwt",
    "dsn",
    "private",
    "credential",
    "cookie",
    "session",
)

_SEPARATORS = re.compile(r"[\s._-]+")


def normalized(key: str) -> str:
    """``"X-Api-Key"`` -> ``"xapikey"``: how keys are compared with the secret words."""
    return _SEPARATORS.sub("", key).lower()


def secret_words(extra: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """:data:`SECRET_WORDS` with ``extra`` (default: ``REDACT_KEYS``), normalised."""
    if extra is None:
        extra = get_settings().redact_keys
    return SECRET_WORDS + tuple(normalized(word) for word in extra if normalized(word))


def is_secret_key(key: str, words: tuple[str, ...] | None = None) -> bool:
    if words is None:
        words = secret_words()
    compact = normalized(key)
    return any(word in compact for word in words)


def redact(value: Any, words: tuple[str, ...] | None = None) -> Any:
    """A copy of ``value`` with the values of secret-looking keys masked, at any depth."""
    if words is None:
        words = secret_words()
    if isinstance(value, dict):
        return {
            k: (MASK if isinstance(k, str) and is_secret_key(k, words) else redact(v, words))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        if value and all(_is_pair(item) for item in value):
            # [name, value] pairs (headers, form fields): masked by name, like dict keys.
            return [
                [name, MASK if is_secret_key(name, words) else redact(item, words)]
                for name, item in value
            ]
        return [redact(v, words) for v in value]
    return value


def _is_pair(value: Any) -> bool:
    return isinstance(value, list | tuple) and len(value) == 2 and isinstance(value[0], str)
