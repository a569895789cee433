"""The client boundary: browser and mobile clients *request* jobs over HTTP.

Nothing here claims, leases or acknowledges a job; workers do that, never clients.
Include :mod:`durable_jobs.urls` to turn it on; only handlers marked
``@job(requestable=True)`` can be requested.

- :mod:`durable_jobs.http.views`: the two endpoints and their JSON answers.
- :mod:`durable_jobs.http.requesting`: the client key, the throttle and the enqueue,
  inside one locked transaction; whose job is whose.
- :mod:`durable_jobs.http.arguments`: the JSON body checked against the handler's
  signature, with one error list per argument.
- :mod:`durable_jobs.http.throttle`: per-user sliding windows, ``throttle="10/1m"``.
- :mod:`durable_jobs.http.checks`: the system checks of each handler's options.

Public: :mod:`durable_jobs.urls` and the two views; the rest is internal.
"""
