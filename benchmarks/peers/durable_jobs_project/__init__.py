"""durable_jobs' side of the comparison: the driver, over ``benchmarks/run.py``'s phase.

The project is the one ``benchmarks/run.py`` uses (``benchmarks/settings.py`` and
``benchmarks/benchapp``), in the repository's own virtualenv.
"""
