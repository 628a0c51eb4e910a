from django.db import migrations, models

import tenants.models


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0002_audit_append_only'),
    ]

    operations = [
        migrations.AddField(
            model_name='tenant',
            name='signing_key',
            field=models.CharField(default=tenants.models.new_signing_key, max_length=64),
        ),
        migrations.AddField(
            model_name='tenant',
            name='alert_webhook_url',
            field=models.URLField(blank=True, max_length=2048),
        ),
        migrations.AddField(
            model_name='tenant',
            name='alert_email',
            field=models.EmailField(blank=True, max_length=254),
        ),
    ]
