"""Flow control: queue pause and limits, unique jobs, concurrency keys, batches, diagnosis.

The limits are enforced by the database inside the claim transaction (see
:mod:`durable_jobs.db`); this package holds their definitions and the operator API.
"""
