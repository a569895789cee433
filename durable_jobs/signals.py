"""Signals other parts of a project (and durable_jobs' own schedules) can listen to."""

from django.dispatch import Signal

#: Sent when a job reaches a final state through an attempt (completed, dead, cancelled).
#: Arguments: ``job`` (the row, with its new ``state``) and ``attempt`` (the Attempt row).
job_finished = Signal()
