"""The job lifecycle: the state machine and everything that writes a job's state.

- :mod:`~durable_jobs.lifecycle.states`: the six states and the allowed moves (pure
  data; what the models and the engines import);
- :mod:`~durable_jobs.lifecycle.sql`: what a claim and an outcome write, in SQL;
- :mod:`~durable_jobs.lifecycle.transitions`: the only writers of ``Job.state``;
- :mod:`~durable_jobs.lifecycle.outcomes`: what an attempt's end means
  (:class:`~durable_jobs.lifecycle.outcomes.Settlement`);
- :mod:`~durable_jobs.lifecycle.recording`: writing settlements, and what follows;
- :mod:`~durable_jobs.lifecycle.errors`: errors and results as storable text.

Internal, except what :mod:`durable_jobs.states` re-exports.
"""
