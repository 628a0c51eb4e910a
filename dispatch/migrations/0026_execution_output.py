"""An execution's `output`: the result a target reports with its completion callback
(dispatch/completion.py). Nullable, no default: on the partitioned table it is a
catalog change, no row is rewritten."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('dispatch', '0025_identitykey'),
    ]

    operations = [
        migrations.AddField(
            model_name='execution',
            name='output',
            field=models.JSONField(blank=True, null=True),
        ),
    ]
