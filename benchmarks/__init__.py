"""Benchmarks for durable_jobs: run ``python benchmarks/run.py --help``."""
