from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "benchmarks.benchapp"
    label = "durable_jobs_bench"
    verbose_name = "durable_jobs benchmarks"
