"""Settings for the ``manage.py runserver`` processes of tests/test_inline_worker.py.

The test suite's settings, with ``DEBUG`` and ``DURABLE_JOBS["INLINE_WORKER"]`` taken from
the environment (``DURABLE_JOBS_TEST_DEBUG``: ``true``/``false``, default true;
``DURABLE_JOBS_TEST_INLINE_WORKER``: ``true``/``false``/``none``, default none), a
schedule every second when ``DURABLE_JOBS_TEST_SCHEDULE`` is set, and a URLconf with a
view that enqueues.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import DURABLE_JOBS

_FLAGS = {"true": True, "false": False, "none": None}

DEBUG = _FLAGS[os.environ.get("DURABLE_JOBS_TEST_DEBUG", "true")]
ROOT_URLCONF = "tests.runserver_urls"
DURABLE_JOBS = {
    **DURABLE_JOBS,
    "INLINE_WORKER": _FLAGS[os.environ.get("DURABLE_JOBS_TEST_INLINE_WORKER", "none")],
}
if os.environ.get("DURABLE_JOBS_TEST_SCHEDULE"):
    DURABLE_JOBS["SCHEDULES"] = {
        "inline-add": {"interval": "1s", "job": "tests.add", "payload": {"a": 1, "b": 1}}
    }
