"""The durable records: jobs, their attempts, batches, queues, and the nodes that run them.

Timestamps are always written from Django's ``timezone.now()`` (the application
clock), never the database clock, so SQLite and PostgreSQL agree and tests can
control time.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.timezone import now
from django.utils.translation import gettext_lazy as _

from durable_jobs.conf import get_settings
from durable_jobs.flow.rates import format_rate
from durable_jobs.indexes import PartialIndex

# How attempts end is the lifecycle's vocabulary, importable from here too.
from durable_jobs.lifecycle.states import CLAIMABLE, FINAL, State
from durable_jobs.lifecycle.states import FAILED_OUTCOMES as FAILED_OUTCOMES
from durable_jobs.lifecycle.states import GIVEN_BACK_OUTCOMES as GIVEN_BACK_OUTCOMES
from durable_jobs.lifecycle.states import Outcome as Outcome


def _claimable() -> Q:
    return Q(state__in=sorted(CLAIMABLE))


class Node(models.Model):
    """One running worker process."""

    name = models.CharField(
        _("name"), max_length=100, unique=True, help_text=_("Synthetic, never the host.")
    )
    pid = models.PositiveIntegerField(_("pid"))
    queues = models.JSONField(
        _("queues"), default=dict, help_text=_("Queue name -> concurrency on this node.")
    )
    concurrency = models.PositiveIntegerField(_("concurrency"), default=0)
    started_at = models.DateTimeField(_("started at"), default=timezone.now)
    last_heartbeat_at = models.DateTimeField(
        _("last heartbeat at"), default=timezone.now, db_index=True
    )
    stopping = models.BooleanField(_("stopping"), default=False)

    class Meta:
        verbose_name = _("node")
        verbose_name_plural = _("nodes")
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def live_after(now: datetime.datetime | None = None) -> datetime.datetime:
        """A node is live while its last heartbeat is more recent than this: one lease
        period, after which its jobs are rescued by others."""
        return (now or timezone.now()) - datetime.timedelta(seconds=get_settings().lease_seconds)


class Queue(models.Model):
    """A queue's shared state: paused, and its cluster-wide limits.

    A row exists once a worker has served the queue, settings declared it, or an
    operator paused it. A queue without a row is running and unlimited.
    """

    name = models.CharField(_("name"), primary_key=True, max_length=100)
    paused = models.BooleanField(_("paused"), default=False)
    paused_at = models.DateTimeField(_("paused at"), null=True, blank=True)
    global_concurrency = models.PositiveIntegerField(
        _("global concurrency"),
        null=True,
        blank=True,
        help_text=_("At most this many leased jobs across every node."),
    )
    rate_limit = models.PositiveIntegerField(
        _("rate limit"),
        null=True,
        blank=True,
        help_text=_("At most this many job starts per rate period."),
    )
    rate_period = models.FloatField(
        _("rate period"),
        null=True,
        blank=True,
        help_text=_("Seconds of the sliding rate-limit window."),
    )
    # Recent starts as [[epoch seconds, count], ...], one entry per claim: the sliding log
    # that the claim transaction reads and appends to while it holds this row's lock.
    rate_window = models.JSONField(_("rate window"), default=list, blank=True)
    created_at = models.DateTimeField(_("created at"), default=now)
    updated_at = models.DateTimeField(_("updated at"), default=now)

    class Meta:
        verbose_name = _("queue")
        verbose_name_plural = _("queues")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_limited(self) -> bool:
        """Whether claims must go through the locked, counting path."""
        return bool(self.global_concurrency or self.rate_limit)

    @property
    def rate(self) -> str:
        return format_rate(self.rate_limit, self.rate_period)


class Batch(models.Model):
    """Jobs enqueued together; a callback job runs once when every one of them is final."""

    id = models.BigAutoField(_("id"), primary_key=True)
    name = models.CharField(_("name"), max_length=255, blank=True, default="")
    total = models.PositiveIntegerField(_("total"), default=0)
    # The callback, as a prepared enqueue: handler name, payload and options.
    callback_name = models.CharField(_("callback name"), max_length=255, blank=True, default="")
    callback_payload = models.JSONField(_("callback payload"), default=dict, blank=True)
    callback_options = models.JSONField(_("callback options"), default=dict, blank=True)
    callback_job_id = models.BigIntegerField(_("callback job id"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), default=now)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    # Jobs per final state, recorded when the batch finished.
    counts = models.JSONField(_("counts"), default=dict, blank=True)
    meta = models.JSONField(_("meta"), default=dict, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name = _("batch")
        verbose_name_plural = _("batches")
        indexes = [
            PartialIndex(
                fields=["created_at"],
                name="durable_batch_open_idx",
                condition=Q(finished_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return self.name or f"batch {self.pk}"

    @property
    def is_finished(self) -> bool:
        return self.finished_at is not None


class Job(models.Model):
    id = models.BigAutoField(_("id"), primary_key=True)
    queue = models.CharField(_("queue"), max_length=100, default="default")
    name = models.CharField(
        _("name"), max_length=255, help_text=_("The handler's registered name.")
    )
    payload = models.JSONField(
        _("payload"), default=dict, help_text=_("Keyword arguments for the handler.")
    )
    # NULL for no key. Unique by a constraint (Meta), not unique=True: that adds an index
    # for LIKE, which no query uses and every write of every job pays for.
    idempotency_key = models.CharField(  # noqa: DJ001
        _("idempotency key"), max_length=255, null=True, blank=True
    )
    # For @job(unique=...): the states (",queued,leased,") in which the key holds. Leaving
    # them frees the key for a new job. Empty: the key holds for the job's lifetime.
    unique_states = models.CharField(_("unique states"), max_length=100, blank=True, default="")
    # At most concurrency_limit jobs sharing concurrency_key are leased at once.
    concurrency_key = models.CharField(  # noqa: DJ001
        _("concurrency key"), max_length=255, null=True, blank=True
    )
    concurrency_limit = models.PositiveIntegerField(_("concurrency limit"), null=True, blank=True)
    batch = models.ForeignKey(
        Batch,
        verbose_name=_("batch"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="jobs",
        db_index=False,  # the partial index below holds only jobs that belong to a batch
    )
    state = models.CharField(_("state"), max_length=16, choices=State.choices, default=State.QUEUED)
    priority = models.SmallIntegerField(
        _("priority"), default=0, help_text=_("-100..100; higher runs first.")
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    max_retries = models.PositiveIntegerField(_("max retries"), default=10)
    timeout = models.FloatField(
        _("timeout"), null=True, blank=True, help_text=_("Seconds; none when empty.")
    )
    available_at = models.DateTimeField(_("available at"), default=timezone.now)
    attempted_at = models.DateTimeField(_("attempted at"), null=True, blank=True)
    lease_expires_at = models.DateTimeField(_("lease expires at"), null=True, blank=True)
    # The lease's node, cleared when it ends (see Attempt.node). No constraint: see 0012.
    leased_by = models.ForeignKey(
        Node,
        verbose_name=_("leased by"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="jobs",
        db_index=False,  # the partial index below holds only leased jobs
        db_constraint=False,
    )
    lease_token = models.UUIDField(_("lease token"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    updated_at = models.DateTimeField(_("updated at"), default=timezone.now)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    result = models.JSONField(_("result"), null=True, blank=True)
    progress = models.FloatField(_("progress"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True, default="")
    meta = models.JSONField(_("meta"), default=dict, blank=True)
    # A job enqueued through Django's Tasks framework: {"backend": alias, "run_after": ISO
    # text or null}. Its name is the Task's module path; its payload {"args", "kwargs"}.
    task = models.JSONField(
        _("task"),
        null=True,
        blank=True,
        help_text=_("For a django.tasks job: its backend alias and run_after."),
    )

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        ordering = ["-id"]
        indexes = [
            # The claim: per queue, highest priority first, then FIFO. Partial, so it
            # only holds the (few) waiting jobs however many finished ones accumulate.
            PartialIndex(
                fields=["queue", "-priority", "available_at", "id"],
                name="durable_job_claim_idx",
                condition=_claimable(),
            ),
            # Rescue of expired leases.
            PartialIndex(
                fields=["lease_expires_at"],
                name="durable_job_lease_idx",
                condition=Q(state=State.LEASED),
            ),
            # Pruning of finished jobs, and the overview's recent counts and throughput
            # (state first: "completed in the last hour" is one range; queue makes
            # the per-queue counts index-only). Only finished jobs have a finished_at;
            # the condition is written on it because SQLite (unlike PostgreSQL) can use
            # a partial index with a parameter only through an IS NOT NULL condition,
            # which any `finished_at >= ?` implies.
            PartialIndex(
                fields=["state", "finished_at", "queue"],
                name="durable_job_finished_idx",
                condition=Q(finished_at__isnull=False),
            ),
            # A node's leased jobs (a stopped node's are unlinked). Partial: every claim
            # and acknowledgement rewrites each full index of the row, so the job table
            # keeps as few full indexes as the admin needs.
            PartialIndex(
                fields=["leased_by"],
                name="durable_job_leased_by_idx",
                condition=Q(leased_by__isnull=False),
            ),
            # The leased holders of a concurrency key, counted in the claim (keyed jobs only).
            PartialIndex(
                fields=["concurrency_key"],
                name="durable_job_key_idx",
                condition=Q(state=State.LEASED, concurrency_key__isnull=False),
            ),
            # A batch's progress and completion check.
            PartialIndex(
                fields=["batch", "state"],
                name="durable_job_batch_idx",
                condition=Q(batch__isnull=False),
            ),
            # The admin's common filters; available_at makes a queue's oldest waiting
            # job (its lag) one index probe.
            models.Index(
                fields=["state", "queue", "available_at"], name="durable_job_state_queue_idx"
            ),
            models.Index(fields=["name", "state"], name="durable_job_name_idx"),
            models.Index(fields=["created_at"], name="durable_job_created_idx"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["idempotency_key"], name="durable_job_idempotency_key"),
            models.CheckConstraint(
                condition=Q(priority__gte=-100, priority__lte=100),
                name="durable_job_priority_range",
            ),
            models.CheckConstraint(
                condition=Q(state__in=[s.value for s in State]),
                name="durable_job_state_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name}#{self.pk} ({self.state})"

    @property
    def is_final(self) -> bool:
        return self.state in FINAL

    @property
    def lease_holder(self) -> Node | None:
        """The node holding the lease, or None: none does, or its row is gone."""
        try:
            return self.leased_by
        except Node.DoesNotExist:  # no constraint keeps the row (migration 0012)
            return None

    @property
    def batch_info(self) -> dict[str, Any]:
        """Set on a batch's callback job: the batch id, name, total and final counts."""
        info = (self.meta or {}).get("batch")
        return info if isinstance(info, dict) else {}

    @property
    def task_backend(self) -> str | None:
        """The ``TASKS`` alias of a job enqueued through Django's Tasks framework, else None."""
        info = self.task
        return info.get("backend") if isinstance(info, dict) else None

    @property
    def schedule_info(self) -> dict[str, Any]:
        """Set on jobs a durable schedule created: id, scheduled and run times."""
        info = (self.meta or {}).get("schedule")
        return info if isinstance(info, dict) else {}


class Overview(Job):
    """The admin's overview page (a proxy, so that the admin index links to it)."""

    class Meta:
        proxy = True
        verbose_name = _("overview")
        verbose_name_plural = _("overview")
        # Seeing it needs only the Job view permission (see OverviewAdmin).
        default_permissions = ()


class Attempt(models.Model):
    """One try at running a job, kept for as long as the job is."""

    id = models.BigAutoField(_("id"), primary_key=True)
    # No constraint nor index of its own in the database (migration 0012 says why).
    job = models.ForeignKey(
        Job,
        verbose_name=_("job"),
        on_delete=models.CASCADE,
        related_name="attempt_set",
        db_constraint=False,
        db_index=False,
    )
    number = models.PositiveIntegerField(_("number"))
    # The job's handler, copied: the overview's history per handler then reads no job row.
    name = models.CharField(_("name"), max_length=255, blank=True, default="")
    # The node's name, as text: Node rows go when their process stops, the history stays.
    node = models.CharField(_("node"), max_length=100, blank=True, default="")
    started_at = models.DateTimeField(_("started at"))
    finished_at = models.DateTimeField(_("finished at"))
    duration = models.DurationField(_("duration"))
    outcome = models.CharField(_("outcome"), max_length=16, choices=Outcome.choices)
    error_class = models.CharField(_("error class"), max_length=255, blank=True, default="")
    error_message = models.TextField(
        _("error message"), blank=True, default="", help_text=_("The whole cause chain.")
    )
    traceback = models.TextField(_("traceback"), blank=True, default="")
    log = models.TextField(
        _("log"), blank=True, default="", help_text=_("Lines logged via context.logger.")
    )

    class Meta:
        verbose_name = _("attempt")
        verbose_name_plural = _("attempts")
        ordering = ["job_id", "id"]
        indexes = [
            models.Index(fields=["job", "number"], name="durable_attempt_job_idx"),
            # The overview's per-handler history: the newest attempts, whatever their
            # outcome (finish times grow as rows are written: inserts hit the last page).
            models.Index(fields=["finished_at"], name="durable_attempt_finished_idx"),
            # Error groups and the failure rate read the newest failures only: partial,
            # so successful attempts (the many) cost it nothing. Queries reach it with
            # outcome__in_constants (see durable_jobs.db.lookups) for SQLite's sake.
            PartialIndex(
                fields=["finished_at"],
                name="durable_attempt_failed_idx",
                condition=Q(outcome__in=FAILED_OUTCOMES),
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of job {self.job_id}: {self.outcome}"


class CatchUp(models.TextChoices):
    """What a schedule does with occurrences missed while no heartbeat ran."""

    LATEST = "latest", _("Run the most recent missed occurrence once")
    ALL = "all", _("Run every missed occurrence, up to catch_up_limit")
    SKIP = "skip", _("Skip missed occurrences")


class Schedule(models.Model):
    """A durable schedule: the heartbeat turns each due occurrence into one job."""

    # (The ``timezone`` field shadows django.utils.timezone inside this class body.)
    id = models.CharField(_("id"), primary_key=True, max_length=150)
    expression = models.CharField(
        _("expression"),
        max_length=200,
        help_text=_("5- or 6-field cron, an interval like 5m, or once:<ISO time>."),
    )
    timezone = models.CharField(
        _("timezone"), max_length=64, default="UTC", help_text=_("IANA name, e.g. Europe/Paris.")
    )
    queue = models.CharField(_("queue"), max_length=100, default="default")
    name = models.CharField(
        _("name"), max_length=255, help_text=_("The handler's registered name.")
    )
    payload = models.JSONField(_("payload"), default=dict, blank=True)
    priority = models.SmallIntegerField(_("priority"), default=0)
    enabled = models.BooleanField(_("enabled"), default=True)
    next_run_at = models.DateTimeField(_("next run at"), null=True, blank=True)
    last_run_at = models.DateTimeField(_("last run at"), null=True, blank=True)
    last_status = models.CharField(_("last status"), max_length=20, blank=True, default="")
    last_error = models.TextField(_("last error"), blank=True, default="")
    last_duration_ms = models.FloatField(_("last duration ms"), null=True, blank=True)
    last_job_id = models.BigIntegerField(_("last job id"), null=True, blank=True)
    run_count = models.PositiveIntegerField(_("run count"), default=0)
    fail_count = models.PositiveIntegerField(_("fail count"), default=0)
    consecutive_fails = models.PositiveIntegerField(_("consecutive fails"), default=0)
    max_consecutive_fails = models.PositiveIntegerField(_("max consecutive fails"), default=5)
    # After a failed enqueue the same occurrence is retried, not before this time.
    retry_at = models.DateTimeField(_("retry at"), null=True, blank=True)
    catch_up = models.CharField(
        _("catch up"), max_length=10, choices=CatchUp.choices, default=CatchUp.LATEST
    )
    catch_up_limit = models.PositiveIntegerField(_("catch up limit"), default=10)
    # Schedules declared in DURABLE_JOBS["SCHEDULES"] are removed when the declaration goes;
    # those created through the API are left alone.
    declared_in_settings = models.BooleanField(_("declared in settings"), default=False)
    created_at = models.DateTimeField(_("created at"), default=now)
    updated_at = models.DateTimeField(_("updated at"), default=now)
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["id"]
        indexes = [
            # The heartbeat reads only due, enabled schedules, however many exist.
            PartialIndex(
                fields=["next_run_at"],
                name="durable_schedule_due_idx",
                condition=Q(enabled=True),
            )
        ]

    def __str__(self) -> str:
        return self.id


class JobRequest(models.Model):
    """A job a client requested over HTTP (:mod:`durable_jobs.urls`): who asked, with which key.

    The row maps a user's ``Idempotency-Key`` for a handler to the job it got, so a
    retried request finds the same job; it decides who may read a job's status; and
    the handler's ``throttle`` counts these rows, one index range per user and handler.
    A request the endpoint refused (bad arguments, a body too large, throttled) of a
    throttled handler is recorded too, with no job and no key: the throttle counts it.
    """

    id = models.BigAutoField(primary_key=True)
    # Deleted with the job (pruning and operators' deletes included). None for a refused
    # request, kept only for the throttle to count (and pruned as old finished jobs are).
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="requests", null=True, blank=True
    )
    user = models.CharField(max_length=255, help_text="The requesting user's primary key.")
    name = models.CharField(max_length=255, help_text="The handler's registered name.")
    # NULL for a refused request: the unique constraint below allows any number of them.
    key = models.CharField(  # noqa: DJ001 (NULL, not "", is what the constraint allows)
        max_length=255, null=True, blank=True, help_text="The client's Idempotency-Key."
    )
    # SHA-256 of the arguments, so that a key reused with other arguments is refused.
    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=now)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # One job per user, handler and key, whatever the job's own key is.
            models.UniqueConstraint(fields=["user", "name", "key"], name="durable_request_key")
        ]
        indexes = [
            # The throttle: a user's newest requests of one handler.
            models.Index(fields=["user", "name", "created_at"], name="durable_request_recent_idx")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} requested by user {self.user}"
