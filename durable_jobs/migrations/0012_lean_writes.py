"""No foreign key constraints in the database on the two relations every job writes.

An attempt is inserted only by the statement that settles its job, and a claim sets the
node holding the lease: each constraint's check cost every job a locking read of the
row it points to (about a fifth of PostgreSQL's work per job, more when the outcome and
the claim are one statement). Django still deletes attempts with their job, and unlinks
a node's jobs when the node's row goes. The attempt's own index on its job goes too:
``(job, number)`` serves the same lookups.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('durable_jobs', '0011_mysql_indexes'),
    ]

    operations = [
        migrations.AlterField(
            model_name='attempt',
            name='job',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attempt_set', to='durable_jobs.job', verbose_name='job'),
        ),
        migrations.AlterField(
            model_name='job',
            name='leased_by',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='jobs', to='durable_jobs.node', verbose_name='leased by'),
        ),
    ]
