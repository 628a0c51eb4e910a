from django.db import migrations, models


class Migration(migrations.Migration):
    # Nullable, no default: adding it rewrites nothing on a large executions table.
    dependencies = [
        ("dispatch", "0007_managedcommand_sandbox"),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="published_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
