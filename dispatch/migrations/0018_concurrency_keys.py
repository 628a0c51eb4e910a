"""Keyed concurrency (dispatch/concurrency_keys.py): the definition on the schedule,
the rendered key on the execution, and the partial index of the rows holding a key.

Both columns are nullable without a default: adding them rewrites nothing. The index
is built CONCURRENTLY like 0011 and 0014 (dispatch_execution is the beat's insert
target) and holds only executions with a key in a holding state, so the firing path
of keyless rows never writes an entry of it.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("dispatch", "0017_schedule_lifecycle"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="concurrency_key",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="execution",
            name="concurrency_key",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(
                condition=models.Q(
                    ("concurrency_key__isnull", False),
                    ("state__in", ["queued", "running", "retry_scheduled"]),
                ),
                fields=["tenant", "concurrency_key"],
                name="execution_key_holders",
            ),
        ),
    ]
