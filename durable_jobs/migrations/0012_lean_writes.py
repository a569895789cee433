"""Fewer index entries and no foreign key checks on the writes every job makes.

- No foreign key constraints on ``Attempt.job`` and ``Job.leased_by``. An attempt is
  inserted only by the statement that settles its job, and a claim sets the node
  holding the lease: each constraint's check cost every job a locking read of the row
  it points to (about a fifth of PostgreSQL's work per job, more when the outcome and
  the claim are one statement). Django still deletes attempts with their job, and
  unlinks a node's jobs when the node's row goes. The attempt's own index on its job
  goes too: ``(job, number)`` serves the same lookups.
- The idempotency key is unique through a named constraint instead of ``unique=True``,
  which on PostgreSQL also kept an index for ``LIKE`` queries that nothing runs: one
  entry per insert, claim and outcome of every job. The existing unique index is
  renamed in place (PostgreSQL, MySQL); nothing is rebuilt.
- The concurrency key's index leaves out jobs without a key, so a claim of one adds no
  entry (PostgreSQL, SQLite; MySQL has no partial indexes and keeps its index as it is).

On SQLite the job and attempt tables are rebuilt (SQLite cannot drop a constraint in
place); elsewhere no table is rewritten.
"""

import django.db.models.deletion
from django.db import migrations, models

JOB = "durable_jobs_job"
UNIQUE = "durable_job_idempotency_key"
#: The names unique=True gave the key's constraint on PostgreSQL and MySQL, and the
#: index Django added for LIKE on PostgreSQL (named from the table and column).
OLD_PG_UNIQUE = "durable_jobs_job_idempotency_key_key"
OLD_PG_LIKE = "durable_jobs_job_idempotency_key_935b127d_like"
OLD_MY_UNIQUE = "idempotency_key"

OLD_KEY_INDEX = models.Index(
    condition=models.Q(("state", "leased")), fields=["concurrency_key"], name="durable_job_key_idx"
)
NEW_KEY_INDEX = models.Index(
    condition=models.Q(("concurrency_key__isnull", False), ("state", "leased")),
    fields=["concurrency_key"],
    name="durable_job_key_idx",
)


def unique_constraint_in_place(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(f'ALTER TABLE "{JOB}" RENAME CONSTRAINT "{OLD_PG_UNIQUE}" TO "{UNIQUE}"')
        schema_editor.execute(f'DROP INDEX IF EXISTS "{OLD_PG_LIKE}"')
    elif vendor == "mysql":
        schema_editor.execute(f"ALTER TABLE `{JOB}` RENAME INDEX `{OLD_MY_UNIQUE}` TO `{UNIQUE}`")
    # SQLite: the table is rebuilt below, from the new state.


def unique_field_back(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(f'ALTER TABLE "{JOB}" RENAME CONSTRAINT "{UNIQUE}" TO "{OLD_PG_UNIQUE}"')
        schema_editor.execute(
            f'CREATE INDEX "{OLD_PG_LIKE}" ON "{JOB}" ("idempotency_key" varchar_pattern_ops)'
        )
    elif vendor == "mysql":
        schema_editor.execute(f"ALTER TABLE `{JOB}` RENAME INDEX `{UNIQUE}` TO `{OLD_MY_UNIQUE}`")


def key_index_without_keyless_jobs(apps, schema_editor):
    _replace_key_index(apps, schema_editor, OLD_KEY_INDEX, NEW_KEY_INDEX)


def key_index_back(apps, schema_editor):
    _replace_key_index(apps, schema_editor, NEW_KEY_INDEX, OLD_KEY_INDEX)


def _replace_key_index(apps, schema_editor, old, new):
    # MySQL built either without its condition: the same index, left as it is.
    if schema_editor.connection.vendor != "mysql":
        job = apps.get_model("durable_jobs", "Job")
        schema_editor.remove_index(job, old)
        schema_editor.add_index(job, new)


class Migration(migrations.Migration):
    dependencies = [
        ("durable_jobs", "0011_mysql_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.UniqueConstraint(fields=("idempotency_key",), name=UNIQUE),
                ),
                migrations.AlterField(
                    model_name="job",
                    name="idempotency_key",
                    field=models.CharField(
                        blank=True, max_length=255, null=True, verbose_name="idempotency key"
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(unique_constraint_in_place, unique_field_back),
            ],
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="job", name="durable_job_key_idx"),
                migrations.AddIndex(model_name="job", index=NEW_KEY_INDEX),
            ],
            database_operations=[
                migrations.RunPython(key_index_without_keyless_jobs, key_index_back),
            ],
        ),
        migrations.AlterField(
            model_name="attempt",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="attempt_set",
                to="durable_jobs.job",
                verbose_name="job",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="leased_by",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="jobs",
                to="durable_jobs.node",
                verbose_name="leased by",
            ),
        ),
    ]
