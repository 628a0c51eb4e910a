"""A beat's standby after a publish stall (dispatch/scheduler/handover.py): since when it
stands by, how many times it handed its partitions over, and whether its publishes are
failing now (a beat that cannot publish is no taker for another's hand-over).

All three columns are ones old code can ignore: `standby_since` is nullable, the
others have a database default, so old beats' raw INSERT (beat_register), which names
its columns, still works beside new ones.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dispatch", "0020_fill_calendar_expanded"),
    ]

    operations = [
        migrations.AddField(
            model_name="beatnode",
            name="standby_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="beatnode",
            name="handovers_total",
            field=models.BigIntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name="beatnode",
            name="publish_failing",
            field=models.BooleanField(db_default=False),
        ),
    ]
