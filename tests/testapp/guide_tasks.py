"""The examples of Django's Tasks topic guide (docs/topics/tasks.txt), as written there."""

import logging

from django.core.mail import send_mail

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]


@task
def email_users(emails, subject, message):
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


logger = logging.getLogger(__name__)


@task(takes_context=True)
def email_users_with_context(context, emails, subject, message):
    logger.debug(
        f"Attempt {context.attempt} to send user email. Task result id: {context.task_result.id}."
    )
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task
def process_data(data):
    return data


@task()
def double_dictionary(key):
    return {key: key * 2}


@task
def calculate_meaning_of_life():
    return 42
