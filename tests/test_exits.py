"""Exit statuses described for logs and attempt errors."""

from __future__ import annotations

import signal

from durable_jobs.worker.exits import describe_exit


def test_status_and_signals_are_named() -> None:
    assert describe_exit(0) == "exited with status 0"
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(-signal.SIGSEGV) == "was killed by SIGSEGV"
    assert describe_exit(-200) == "was killed by signal 200"
    assert describe_exit(None) == "did not report an exit status"
