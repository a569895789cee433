"""Django's Tasks framework, from Django (6.0+) or from the ``django-tasks`` backport.

Everything else in :mod:`durable_jobs.backends` imports the framework's names from here,
so that one module knows where each lives and how the backport spells it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    # Typed as Django's own; the backport has the same shapes.
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    FRAMEWORK_LOGGER = "django.tasks"
else:
    try:
        from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError
        from django.tasks.exceptions import (
            InvalidTask,
            InvalidTaskBackend,
            TaskResultDoesNotExist,
            TaskResultMismatch,
        )
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json

        #: The logger Django's own task signals log to.
        FRAMEWORK_LOGGER = "django.tasks"
    except ImportError:
        try:
            from django_tasks import (
                TaskContext,
                TaskResult,
                TaskResultStatus,
                task_backends,
            )
            from django_tasks.backends.base import BaseTaskBackend
            from django_tasks.base import Task, TaskError
            from django_tasks.exceptions import (
                InvalidTaskBackendError as InvalidTaskBackend,
            )
            from django_tasks.exceptions import (
                InvalidTaskError as InvalidTask,
            )
            from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
            from django_tasks.signals import (
                task_enqueued,
                task_finished,
                task_started,
            )
            from django_tasks.utils import normalize_json

            FRAMEWORK_LOGGER = "django_tasks"
        except ImportError:
            raise ImproperlyConfigured(
                "durable_jobs.backends.tasks needs Django's Tasks framework: Django 6.0 or newer, "
                "or on Django 5.2 the django-tasks backport (pip install "
                "'django-durable-jobs[tasks]')."
            ) from None


__all__ = [
    "FRAMEWORK_LOGGER",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
