import os

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        if os.environ.get("DURABLE_JOBS_TEST_TASK_SIGNALS"):
            # A worker process started by tests/test_tasks_worker.py records the task
            # signals it sends, for the test process to read back.
            from tests.testapp.task_signals import connect

            connect()
        if os.environ.get("DURABLE_JOBS_TEST_LIFECYCLE_SIGNALS"):
            # tests/test_signals.py: a worker process records the lifecycle signals.
            from tests.testapp.lifecycle_signals import connect as connect_lifecycle

            connect_lifecycle(raise_first=bool(os.environ.get("DURABLE_JOBS_TEST_RAISING")))
