"""The client boundary: let browser and mobile clients *request* jobs over HTTP.

Opt in by including it in the project's URLconf::

    path("jobs/", include("durable_jobs.urls"))

``POST jobs/request/<handler name>/``
    Request a job of a handler marked ``@job(requestable=True)``; the JSON body holds
    its keyword arguments, the ``Idempotency-Key`` header makes it safe to retry.
``GET jobs/<job id>/``
    The status of a job this user requested.

There is nothing else: no route claims, leases or acknowledges a job. Workers do
that, never clients. See :mod:`durable_jobs.http.views` for the answers.
"""

from django.urls import path

from durable_jobs.http import views

app_name = "durable_jobs"

urlpatterns = [
    path("request/<path:name>/", views.request_job, name="request"),
    path("<int:job_id>/", views.job_status, name="status"),
]
