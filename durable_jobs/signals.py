"""Signals other parts of a project (and durable_jobs' own schedules) can listen to."""

from django.dispatch import Signal

#: Sent when a job reaches a final state through an attempt (completed, dead, cancelled).
#: Arguments: ``job`` (the row, with its new ``state``), ``attempt`` (the Attempt row) and
#: ``error`` (the exception the attempt ended with, or None).
job_finished = Signal()
