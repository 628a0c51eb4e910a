"""Schema: tenant names and token names refuse invisible characters; two tenants may
no longer share the tenant part of their secret variables (`a-b` / `a_b`).

If existing tenants already collide, AddConstraint fails: that pair was reading
each other's `env:` secrets. Rename one slug (docs/how-to/secrets.md, "Upgrading
from the single-underscore naming") and migrate again; nothing is renamed here, silently.
"""

import django.db.models.functions.text
from django.db import migrations, models

import tenants.naming


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0004_distinct_signing_keys'),
    ]

    operations = [
        migrations.AlterField(
            model_name='servicetoken',
            name='name',
            field=models.CharField(max_length=100, validators=[tenants.naming.validate_visible]),
        ),
        migrations.AlterField(
            model_name='tenant',
            name='name',
            field=models.CharField(max_length=200, validators=[tenants.naming.validate_visible]),
        ),
        migrations.AlterField(
            model_name='tenant',
            name='slug',
            field=models.SlugField(max_length=63, unique=True, validators=[tenants.naming.validate_slug_rules]),
        ),
        migrations.AddConstraint(
            model_name='tenant',
            constraint=models.UniqueConstraint(django.db.models.functions.text.Upper(django.db.models.functions.text.Replace('slug', models.Value('-'), models.Value('_'))), name='tenant_slug_env_key_unique', violation_error_message="another tenant's slug maps to the same secret variables"),
        ),
    ]
