"""Admission grants (dispatch.models.AdmissionGrant), and the one definition of which
of them still count: the view dispatch_admissiongrant_live, the grants whose range is
still their beat's at the epoch they named (read by tenant_slots, pruned by
admission_grants_clear in dispatch/sql/beat.sql)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dispatch", "0026_execution_output"),
    ]

    operations = [
        migrations.CreateModel(
            name="AdmissionGrant",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("beat", models.CharField(max_length=200)),
                ("tenant_id", models.BigIntegerField()),
                ("range_number", models.PositiveSmallIntegerField()),
                ("epoch", models.BigIntegerField()),
                ("slots", models.PositiveIntegerField()),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant_id", "beat"), name="admission_grant_one"
                    )
                ],
            },
        ),
        migrations.RunSQL(
            """
            CREATE VIEW dispatch_admissiongrant_live AS
            SELECT g.* FROM dispatch_admissiongrant g
            JOIN dispatch_schedulerpartition p
              ON p.number = g.range_number AND p.epoch = g.epoch AND p.owner = g.beat
            """,
            "DROP VIEW dispatch_admissiongrant_live",
        ),
    ]
