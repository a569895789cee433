"""The client boundary's two endpoints, answering in JSON (routes: :mod:`durable_jobs.urls`).

Every refusal has the same shape, ``{"error": "<code>", "message": "...", "errors":
{"<field>": ["..."]}}`` (``errors`` only where a field is at fault), and is checked in
this order:

=====  ==========================  ==========================================================
405    ``method_not_allowed``      not POST (request) or GET/HEAD (status); with ``Allow``
401    ``not_authenticated``       ``request.user`` is anonymous
403    ``inactive_user``           ``request.user`` is not active (``is_active`` false)
403    ``csrf_failed``             Django's CSRF check failed (see below)
404    ``not_found``               no such requestable handler; no such job of this user
403    ``permission_denied``       the user lacks the handler's ``permission``
415    ``unsupported_media_type``  a body that is not ``application/json``
413    ``too_large``               a body over ``HTTP_MAX_BODY_BYTES`` (64 KiB)
400    ``invalid``                 not a JSON object, no ``Idempotency-Key``, bad arguments
422    ``key_reused``              the key was used with other arguments
429    ``throttled``               the handler's ``throttle``; with ``Retry-After``
=====  ==========================  ==========================================================

Neither view runs inside the project's ``ATOMIC_REQUESTS`` transaction
(``non_atomic_requests``).

**Authentication** is the project's: whatever middleware sets ``request.user``
(sessions, or a token middleware for mobile clients). **CSRF**: the views are exempt
from the middleware only so that they can run Django's own check themselves, after
authentication, and answer in JSON. The check is the middleware's, whole (token,
``Origin``, ``Referer``, trusted origins); a request that its authentication marked
with ``request._dont_enforce_csrf_checks = True`` skips it, as Django's middleware
does: that is how a token middleware says that its credentials are not sent by the
browser on its own, so a cross-site form cannot use them.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from django.core.exceptions import ImproperlyConfigured, RequestDataTooBig
from django.db import connections, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.csrf import csrf_exempt

from durable_jobs.conf import get_settings
from durable_jobs.http import requesting
from durable_jobs.http.arguments import NON_FIELD_ERRORS, Errors, InvalidBody, parse_body
from durable_jobs.http.requesting import Refusal
from durable_jobs.models import Job

#: The header that makes a request safe to retry (the IETF httpapi draft's name).
KEY_HEADER = "Idempotency-Key"
#: 1-255 printable ASCII characters, without spaces at either end.
_KEY = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?")
_JSON_TYPE = re.compile(r"application/(?:[\w.+-]+\+)?json", re.IGNORECASE)


def _outside_atomic_requests(view: Any) -> Any:
    """The view, never inside the project's ``ATOMIC_REQUESTS`` transaction, on any
    database. The endpoint takes its own short write transaction once the request is
    valid; a request-long one would hold SQLite's write lock for the whole request, or,
    begun as a reader, fail to take it ("database is locked")."""
    for alias in connections:
        view = transaction.non_atomic_requests(using=alias)(view)
    return view


@_outside_atomic_requests
@csrf_exempt  # checked in the view, after authentication (see the module's docstring)
def request_job(request: HttpRequest, name: str) -> HttpResponse:
    """``POST``: request a job of handler ``name``; the body holds its keyword arguments.

    202 with the job's status, its ``status_url`` and a ``Location``, for a new request
    and for a repeated one alike (a repeat also has ``Idempotent-Replayed: true``).
    """
    try:
        _allow(request, "POST")
        user = _user(request)
        _check_csrf(request)
        handler = requesting.requestable(name)
        _check_permission(user, handler.permission, handler.name)
    except Refusal as refusal:
        return _refused(refusal)
    try:
        arguments, key = _arguments_and_key(request)
        job, replayed = requesting.submit(user, handler, arguments, key)
    except Refusal as refusal:
        requesting.record_refusal(user, handler)  # the throttle counts it
        return _refused(refusal)
    url = _status_url(request, job)
    response = _json({**requesting.status_of(job), "status_url": url}, status=202)
    response["Location"] = url
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@_outside_atomic_requests  # a read needs no request-long transaction
@csrf_exempt  # only GET and HEAD do anything, and they change nothing
def job_status(request: HttpRequest, job_id: int) -> HttpResponse:
    """``GET``: the status of a job this user requested; 404 for anyone else's."""
    try:
        _allow(request, "GET", "HEAD")
        user = _user(request)
        job = requesting.requested_job(user, job_id)
    except Refusal as refusal:
        return _refused(refusal)
    url = _status_url(request, job)
    return _json({**requesting.status_of(job), "status_url": url}, status=200)


# -- the steps ------------------------------------------------------------------------------


def _allow(request: HttpRequest, *methods: str) -> None:
    if request.method not in methods:
        raise Refusal(
            405,
            "method_not_allowed",
            f"Use {' or '.join(methods)} here.",
            headers={"Allow": ", ".join(methods)},
        )


def _user(request: HttpRequest) -> Any:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        raise Refusal(401, "not_authenticated", "Authentication is required.")
    # Django's ModelBackend never logs an inactive user in, but a project's token
    # middleware or AllowAllUsersModelBackend may: a deactivated account asks nothing.
    if not getattr(user, "is_active", True):
        raise Refusal(403, "inactive_user", "This account is not active.")
    return user


class _CsrfRejected(Exception):
    pass


class _CsrfCheck(CsrfViewMiddleware):
    """Django's CSRF middleware, raising its reason instead of rendering the failure view.

    ``_reject`` is private, but has been the middleware's one exit for every failure
    since Django 1.x; Django REST framework's session authentication overrides it too.
    """

    def _reject(self, request: HttpRequest, reason: str) -> NoReturn:
        raise _CsrfRejected(reason)


def _not_exempt(request: HttpRequest) -> HttpResponse:
    """A stand-in view for the check: the real one is exempt, the check must not be."""
    raise AssertionError("never called")


def _check_csrf(request: HttpRequest) -> None:
    # One per request, as the middleware caches the trusted origins from the settings.
    check = _CsrfCheck(lambda r: HttpResponse())
    check.process_request(request)
    try:
        check.process_view(request, _not_exempt, (), {})
    except _CsrfRejected as exc:
        raise Refusal(403, "csrf_failed", f"CSRF verification failed: {exc}") from None


def _check_permission(user: Any, permission: object, name: str) -> None:
    if permission is None:
        return
    if not isinstance(permission, str) or "." not in permission:
        # Never let everyone in because the permission is malformed (check E015).
        raise ImproperlyConfigured(
            f"@job(permission=...) of {name} must be 'app_label.codename' "
            "(system check durable_jobs.E015)"
        )
    if not user.has_perm(permission):
        raise Refusal(403, "permission_denied", "You may not request this job.")


def _arguments_and_key(request: HttpRequest) -> tuple[dict[str, Any], str]:
    """The body's arguments and the client's key; the problems of both in one 400."""
    limit = get_settings().http_max_body_bytes
    too_large = Refusal(
        413, "too_large", f"The body is too large: at most {limit} bytes (HTTP_MAX_BODY_BYTES)."
    )
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0  # Django reads such a body as empty
    if declared > limit:
        raise too_large  # before reading a byte of it
    try:
        raw = request.body
    except RequestDataTooBig:
        raise too_large from None
    if len(raw) > limit:
        raise too_large
    if raw.strip() and not _JSON_TYPE.fullmatch(request.content_type or ""):
        raise Refusal(
            415,
            "unsupported_media_type",
            "Send the arguments as a JSON object, with Content-Type: application/json.",
        )
    errors: Errors = {}
    arguments: dict[str, Any] = {}
    try:
        arguments = parse_body(raw)
    except InvalidBody as exc:
        errors[NON_FIELD_ERRORS] = [str(exc)]
    key = _idempotency_key(request.headers.get(KEY_HEADER), errors)
    if errors:
        raise Refusal(400, "invalid", "The request is invalid.", errors=errors)
    return arguments, key


def _idempotency_key(raw: str | None, errors: Errors) -> str:
    if raw is None:
        errors[KEY_HEADER] = [
            "This header is required: a new random value (a UUID) for each request, "
            "the same one when the request is retried."
        ]
        return ""
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]  # the draft standard's quoted form, "8e03978e-..."
    if not _KEY.fullmatch(value):
        errors[KEY_HEADER] = ["Must be 1-255 printable ASCII characters."]
    return value


# -- responses ------------------------------------------------------------------------------


def _json(data: dict[str, Any], *, status: int) -> JsonResponse:
    response = JsonResponse(data, status=status)
    # Answers are per user, and a status changes: no cache may keep them.
    add_never_cache_headers(response)
    return response


def _refused(refusal: Refusal) -> JsonResponse:
    response = _json(refusal.body(), status=refusal.status)
    for header, value in refusal.headers.items():
        response[header] = value
    return response


def _status_url(request: HttpRequest, job: Job) -> str:
    """The job's status URL, in the namespace the request came through (a project may
    include ``durable_jobs.urls`` more than once, or under its own namespace)."""
    match = request.resolver_match
    namespace = match.namespace if match is not None and match.namespace else "durable_jobs"
    return reverse(f"{namespace}:status", kwargs={"job_id": job.pk})
