"""A client's request for a job: its key, its throttle, the enqueue; and whose job is whose.

:func:`submit` does it all in one transaction that holds a lock on the user and the
handler (:meth:`~durable_jobs.db.engine.Engine.keyed_transaction`; PostgreSQL: an
advisory lock taken before the transaction, so that its snapshot sees the previous
request under any isolation level; SQLite: the write lock), so that a retried request
and a new one of the same user never race each other:

1. the user's ``Idempotency-Key`` for this handler already has a job: that job (its
   arguments must be the same ones, or the reuse is refused);
2. otherwise the arguments are checked, the throttle consulted, and the job enqueued
   through the ordinary path (:func:`durable_jobs.enqueueing.insert_or_get`), with
   the idempotency key ``http:<sha256 of user, handler and client key>``: users
   cannot collide with, or probe for, each other's keys. A ``unique`` handler keeps
   its own key instead, scoped by the user, so ``unique`` holds among each user's
   requests: a user whose request matches a unique job of theirs already waiting gets
   that job, while another user's matching request gets a job of its own;
3. a :class:`~durable_jobs.models.JobRequest` row records the request: the key's job,
   what the throttle counts, and who may read the job's status.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from django.db.models import Exists, OuterRef
from django.utils import timezone

from durable_jobs import limits, registry
from durable_jobs.db import engine_for
from durable_jobs.db.engine import Engine
from durable_jobs.enqueueing import insert_or_get, rerun_if_rolled_back
from durable_jobs.exceptions import EnqueueError, UnknownJob
from durable_jobs.handlers import EnqueueOptions, JobHandler
from durable_jobs.http import throttle
from durable_jobs.http.arguments import NON_FIELD_ERRORS, Errors, field_errors
from durable_jobs.lifecycle.states import State
from durable_jobs.models import Job, JobRequest
from durable_jobs.redaction import redact
from durable_jobs.serializers import iso

logger = logging.getLogger("durable_jobs")


class Refusal(Exception):
    """A request answered with an error: the HTTP status, a stable code and a message."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        errors: Errors | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        data: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.errors is not None:
            data["errors"] = self.errors
        return data


#: The largest id a job can have (a signed 64-bit column).
MAX_JOB_ID = limits.BIGINT_MAX

NOT_FOUND = "No job here is yours, or can be requested, under this name or id."


def requestable(name: str) -> JobHandler:
    """The handler ``name``, if clients may request it. An unknown handler and one that
    is not requestable are the same 404, so that names cannot be probed."""
    try:
        handler = registry.get_handler(name)
    except UnknownJob:
        raise Refusal(404, "not_found", NOT_FOUND) from None
    if handler.requestable is not True:
        raise Refusal(404, "not_found", NOT_FOUND)
    return handler


def user_key(user: Any) -> str:
    """How a user is recorded in :class:`~durable_jobs.models.JobRequest`: its primary key."""
    return str(user.pk)


def job_key(user: str, name: str, key: str) -> str:
    """The job's idempotency key for a user's client key: hashed, so that it has a fixed
    length whatever the handler's name, and reveals nothing of the user or key."""
    digest = hashlib.sha256(json.dumps([user, name, key]).encode()).hexdigest()
    return f"http:{digest}"


def fingerprint(arguments: Mapping[str, Any]) -> str:
    """SHA-256 of the arguments as canonical JSON: what a retried request must repeat."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def submit(user: Any, handler: JobHandler, arguments: dict[str, Any], key: str) -> tuple[Job, bool]:
    """``(job, replayed)``: the job for this request; replayed when the key had one.

    Raises :class:`Refusal` for arguments that do not fit (400), a key reused with
    other arguments (422), or a throttled user (429).
    """
    who = user_key(user)
    engine = engine_for(None)
    alias = engine.alias
    arguments_hash = fingerprint(arguments)
    # A new request is checked before the write transaction: a refused one (bad arguments,
    # a throttled user) never takes the database's write lock (SQLite's is the whole
    # database's), however large or slow to check it is. Under the lock, below, the same
    # checks run again, exactly; a retried key goes straight there, to its job.
    if not JobRequest.objects.using(alias).filter(user=who, name=handler.name, key=key).exists():
        # Reads in autocommit: run again if the database ended one to break a deadlock
        # (InnoDB may, under SERIALIZABLE, where plain reads take shared locks).
        rerun_if_rolled_back(engine, lambda: _check_new_request(handler, arguments, who, alias))
    # The transaction holds the lock; InnoDB may still end it to break a deadlock (under
    # SERIALIZABLE its reads take shared locks that a refusal's write waits on): it
    # wrote nothing then, and runs again.
    return rerun_if_rolled_back(
        engine, lambda: _submit_locked(engine, handler, arguments, who, key, arguments_hash)
    )


def _submit_locked(
    engine: Engine,
    handler: JobHandler,
    arguments: dict[str, Any],
    who: str,
    key: str,
    arguments_hash: str,
) -> tuple[Job, bool]:
    """:func:`submit`'s transaction, under the lock on the user and the handler."""
    alias = engine.alias
    with engine.keyed_transaction(f"durable_jobs.request:{who}:{handler.name}"):
        earlier = JobRequest.objects.using(alias).filter(user=who, name=handler.name, key=key)
        previous = earlier.first()
        if previous is not None and previous.job_id is not None:
            job = Job.objects.using(alias).filter(pk=previous.job_id).first()
            if job is not None:
                if previous.fingerprint != arguments_hash:
                    raise Refusal(
                        422,
                        "key_reused",
                        "This Idempotency-Key was used with other arguments; use a new key "
                        "for a new request.",
                        errors={"Idempotency-Key": ["Already used with other arguments."]},
                    )
                return job, True
            # Its job was deleted behind Django's back (no cascade): the key is free.
            earlier.delete()
        _check_new_request(handler, arguments, who, alias)
        options = EnqueueOptions(
            # A unique handler's own key decides, as for any enqueue, but per user: a
            # user whose arguments match another user's job must not get (and read) it.
            idempotency_key=None if handler.unique is not None else job_key(who, handler.name, key),
            unique_scope=f"user:{who}",
            meta={"requested_by": {"user": who}},
        )
        try:
            job, _ = insert_or_get(
                handler, handler.check_arguments((), arguments), options, using=alias
            )
        except EnqueueError as exc:
            # The handler's concurrency_key function (project code) refused these
            # arguments. Its text is the project's, perhaps with a secret: logged for the
            # developers, never answered to the client.
            logger.warning("request for %s refused: %s", handler.name, exc)
            raise Refusal(
                400,
                "invalid",
                "The arguments do not fit this job.",
                errors={NON_FIELD_ERRORS: ["This job's key cannot be made from these arguments."]},
            ) from None
        JobRequest.objects.using(alias).create(
            job=job,
            user=who,
            name=handler.name,
            key=key,
            fingerprint=arguments_hash,
            created_at=timezone.now(),
        )
    return job, False


def record_refusal(user: Any, handler: JobHandler) -> None:
    """Count a refused request (400, 413, 415, 422, 429) of a throttled handler against its
    user's throttle: one short write, after the refusal was decided without any. A client
    cannot then send invalid requests, or keep retrying a throttled one, for free."""
    if handler.throttle is None:
        return
    engine = engine_for(None)
    rerun_if_rolled_back(
        engine,
        lambda: JobRequest.objects.using(engine.alias).create(
            job=None, user=user_key(user), name=handler.name, key=None, created_at=timezone.now()
        ),
    )


def _check_new_request(
    handler: JobHandler, arguments: dict[str, Any], who: str, alias: str
) -> None:
    """Refuse arguments that do not fit the handler (400) and a throttled user (429)."""
    errors = field_errors(handler, arguments)
    if errors:
        raise Refusal(400, "invalid", "The arguments do not fit this job.", errors=errors)
    if handler.throttle is not None:
        wait = throttle.retry_after(
            user=who, name=handler.name, throttle=handler.throttle, using=alias
        )
        if wait is not None:
            raise Refusal(
                429,
                "throttled",
                f"Too many requests for this job; try again in {wait} seconds.",
                headers={"Retry-After": str(wait)},
            )


def requested_job(user: Any, job_id: int) -> Job:
    """Job ``job_id``, if ``user`` requested it; else the same 404 as a job that does
    not exist, so that other users' jobs cannot be told apart from missing ones."""
    if not 1 <= job_id <= MAX_JOB_ID:  # past the column's range: no such job, not a 500
        raise Refusal(404, "not_found", NOT_FOUND)
    alias = engine_for(None).alias
    mine = JobRequest.objects.using(alias).filter(job=OuterRef("pk"), user=user_key(user))
    job = Job.objects.using(alias).filter(pk=job_id).filter(Exists(mine)).first()
    if job is None:
        raise Refusal(404, "not_found", NOT_FOUND)
    return job


def status_of(job: Job) -> dict[str, Any]:
    """What a requesting client may know of its job: never the payload, the error text or
    the node; the result only of a completed job whose handler has ``expose_result``."""
    data: dict[str, Any] = {
        "id": job.pk,
        "name": job.name,
        "state": job.state,
        "progress": job.progress,
        "attempts": job.attempts,
        "max_retries": job.max_retries,
        "created_at": iso(job.created_at),
        "available_at": iso(job.available_at),
        "attempted_at": iso(job.attempted_at),
        "finished_at": iso(job.finished_at),
    }
    try:
        exposed = registry.get_handler(job.name).expose_result is True
    except UnknownJob:
        exposed = False
    if exposed and job.state == State.COMPLETED:
        data["result"] = redact(job.result)
    return data
