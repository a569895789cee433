"""On MySQL and MariaDB, which have no partial indexes, the indexes that stand in for them.

On these servers Django creates the earlier migrations' partial indexes without their
conditions. Where the condition was what made an index useful, another
one takes its place: the concurrency key's holders, open batches, failed attempts and
enabled schedules lead with the column the condition tested. The claim's index instead
covers two generated columns, which exist on these servers only: ``claim_queue`` holds
the queue while the job is claimable and NULL after, so finished jobs never lie in the
claimed range, and ``claim_order`` holds the negated priority, so one ascending index
gives "highest priority first, then oldest" (MariaDB before 10.8 ignores DESC in an
index).

Idempotency keys, concurrency keys and queue names compare byte for byte
(``utf8mb4_bin``), as on the other databases; a later migration that alters one of
these columns must keep that collation. Nothing runs on other databases.
"""

from django.db import migrations

JOB = "durable_jobs_job"
#: Compared byte for byte, as on PostgreSQL and SQLite: with the servers' default
#: collations 'Order-1' and 'order-1' would be one idempotency key, one queue.
BINARY = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

FORWARD = [
    f"ALTER TABLE {JOB} MODIFY queue varchar(100) {BINARY} NOT NULL, "
    f"MODIFY idempotency_key varchar(255) {BINARY} NULL, "
    f"MODIFY concurrency_key varchar(255) {BINARY} NULL",
    f"ALTER TABLE durable_jobs_queue MODIFY name varchar(100) {BINARY} NOT NULL",
    f"ALTER TABLE durable_jobs_jobrequest MODIFY `key` varchar(255) {BINARY} NULL",
    # Generated from the row: never written, and kept out of the model.
    f"ALTER TABLE {JOB} "
    f"ADD COLUMN claim_queue varchar(100) {BINARY} AS "
    "(CASE WHEN state IN ('queued', 'retrying') THEN queue END) VIRTUAL, "
    "ADD COLUMN claim_order smallint AS (-priority) VIRTUAL",
    f"CREATE INDEX durable_job_claim_my ON {JOB} (claim_queue, claim_order, available_at, id)",
    f"CREATE INDEX durable_job_key_my ON {JOB} (concurrency_key, state)",
    "CREATE INDEX durable_batch_open_my ON durable_jobs_batch (finished_at, created_at)",
    "CREATE INDEX durable_attempt_failed_my ON durable_jobs_attempt (outcome, finished_at)",
    "CREATE INDEX durable_schedule_due_my ON durable_jobs_schedule (enabled, next_run_at)",
]

BACKWARD = [
    "DROP INDEX durable_schedule_due_my ON durable_jobs_schedule",
    "DROP INDEX durable_attempt_failed_my ON durable_jobs_attempt",
    "DROP INDEX durable_batch_open_my ON durable_jobs_batch",
    f"DROP INDEX durable_job_claim_my ON {JOB}",
    f"DROP INDEX durable_job_key_my ON {JOB}",
    f"ALTER TABLE {JOB} DROP COLUMN claim_queue, DROP COLUMN claim_order",
    # The columns keep their binary collation: switching back could merge keys that
    # differ only in case, which the unique index would refuse.
]


def _on_mysql(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "mysql":
            for statement in statements:
                schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    # MySQL commits each DDL statement anyway; the other databases run nothing.
    atomic = False

    dependencies = [
        ("durable_jobs", "0010_attempt_history"),
    ]

    operations = [
        migrations.RunPython(_on_mysql(FORWARD), _on_mysql(BACKWARD)),
    ]
