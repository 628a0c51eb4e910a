import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('dispatch', '0024_archived_day'),
    ]

    operations = [
        migrations.CreateModel(
            name='IdentityKey',
            fields=[
                ('kid', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('algorithm', models.CharField(max_length=8)),
                ('public_jwk', models.JSONField()),
                ('sealed_private_key', models.BinaryField()),
                ('signs_from', models.DateTimeField(unique=True)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'ordering': ['signs_from'],
            },
        ),
    ]
