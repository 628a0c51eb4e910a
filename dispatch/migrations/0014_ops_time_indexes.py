"""/metrics' and /ops' time windows (see Execution.Meta): enqueued_at and started_at.

Built CONCURRENTLY like 0011: dispatch_execution is the beat's insert target, and a
plain CREATE INDEX would block its inserts for the whole build.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("dispatch", "0013_alert_kind_missed"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(
                condition=models.Q(("enqueued_at__isnull", False)),
                fields=["enqueued_at"],
                name="execution_enqueued_at",
            ),
        ),
        AddIndexConcurrently(
            model_name="execution",
            index=models.Index(
                condition=models.Q(("started_at__isnull", False)),
                fields=["started_at"],
                name="execution_started_at",
            ),
        ),
    ]
