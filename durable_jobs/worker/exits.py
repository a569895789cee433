"""How a child process ended, in words a log line or an attempt's error can carry."""

from __future__ import annotations

import signal


def describe_exit(returncode: int | None) -> str:
    """``3`` -> ``"exited with status 3"``; ``-9`` -> ``"was killed by SIGKILL"``.

    ``returncode`` as :mod:`subprocess` and :mod:`multiprocessing` report it: negative for
    a signal. None (still running, or never started) -> ``"did not report an exit status"``.
    """
    if returncode is None:
        return "did not report an exit status"
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"was killed by {name}"
