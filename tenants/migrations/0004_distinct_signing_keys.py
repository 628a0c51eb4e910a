"""Data: give every existing tenant its own signing key.

Adding a field with a callable default evaluates it once for all existing
rows, so tenants created before 0003 would share one key.
"""

import secrets

from django.db import migrations


def distinct_keys(apps, schema_editor):
    Tenant = apps.get_model("tenants", "Tenant")
    for tenant in Tenant.objects.only("pk").iterator():
        Tenant.objects.filter(pk=tenant.pk).update(signing_key=secrets.token_hex(32))


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0003_signing_key_and_alerts'),
    ]

    operations = [
        migrations.RunPython(distinct_keys, migrations.RunPython.noop),
    ]
