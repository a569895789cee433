"""Flow control: queue pause and limits, unique jobs, concurrency keys, batches, diagnosis.

The limits are enforced inside the claim's transaction (:mod:`durable_jobs.flow.limits`
decides, the engines in :mod:`durable_jobs.db` run the statements); this package also
holds their definitions and the operator API. Public: :mod:`~durable_jobs.flow.queues`,
:mod:`~durable_jobs.flow.rates` and :mod:`~durable_jobs.flow.batches`; the others are
internal.
"""
