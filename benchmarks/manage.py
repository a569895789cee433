#!/usr/bin/env python
"""``manage.py`` for the benchmark project: ``python benchmarks/manage.py runworker --burst``.

The database is chosen by the ``DURABLE_JOBS_BENCH_*`` environment variables
described in ``benchmarks/settings.py``.
"""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
