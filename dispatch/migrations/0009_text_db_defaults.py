from django.db import migrations, models


class Migration(migrations.Migration):
    # Database defaults ('') for the text columns the raw INSERTs filled with ''
    # (dispatch/sql/*.sql): they now name only the columns they set. SET DEFAULT
    # changes the catalog only; no row is rewritten.
    dependencies = [
        ("dispatch", "0008_execution_published_at"),
    ]

    operations = [
        migrations.AlterField(
            model_name="execution",
            name="queue",
            field=models.CharField(blank=True, db_default="", max_length=32),
        ),
        migrations.AlterField(
            model_name="execution",
            name="lease_owner",
            field=models.CharField(blank=True, db_default="", max_length=200),
        ),
        migrations.AlterField(
            model_name="execution",
            name="error",
            field=models.TextField(blank=True, db_default=""),
        ),
        migrations.AlterField(
            model_name="execution",
            name="log_excerpt",
            field=models.TextField(blank=True, db_default=""),
        ),
        migrations.AlterField(
            model_name="execution",
            name="reason_code",
            field=models.CharField(blank=True, db_default="", max_length=40),
        ),
        migrations.AlterField(
            model_name="execution",
            name="reason",
            field=models.CharField(blank=True, db_default="", max_length=500),
        ),
        migrations.AlterField(
            model_name="schedulerpartition",
            name="owner",
            field=models.CharField(blank=True, db_default="", max_length=200),
        ),
    ]
