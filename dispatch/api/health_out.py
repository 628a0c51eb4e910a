"""The `health` object of a schedule (GET /v1/schedules/{id} and /health) and its
OpenAPI description. What counts as a success or a failure: dispatch/selectors/health.py."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from dispatch import selectors
from dispatch.api.serializers import ScheduleOutDoc, iso_z
from dispatch.states import AlertKind


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def health_out(h: selectors.ScheduleHealth) -> dict[str, Any]:
    return {
        "last_run": None
        if h.last_state is None
        else {
            "state": h.last_state,
            "scheduled_for": iso_z(h.last_at),
            "finished_at": iso_z(h.last_finished_at),
        },
        "next_run_at": iso_z(h.next_run_at),
        "consecutive_failures": h.consecutive_failures,
        "consecutive_failures_capped": h.streak_capped,
        "last_success_at": iso_z(h.last_success_at),
        "windows": {
            label: {
                "runs": w.runs,
                "succeeded": w.succeeded,
                "failed": w.failed,
                "success_rate": None if w.success_rate is None else round(w.success_rate, 4),
                "p50_s": _seconds(w.p50_s),
                "p95_s": _seconds(w.p95_s),
            }
            for label, w in h.windows.items()
        },
        "sampled": h.sampled,
        "alerts": {
            "failing": h.alert.failing,
            "snoozed_until": iso_z(h.alert.snoozed_until),
            "auto_paused": h.alert.auto_paused,
            "auto_pause_note": h.alert.auto_pause_note,
            "last_alert": None
            if h.alert.last_alert_kind is None
            else {"kind": h.alert.last_alert_kind, "sent_at": iso_z(h.alert.last_alert_at)},
        },
    }


class LastRunDoc(serializers.Serializer[Any]):
    state = serializers.CharField()
    scheduled_for = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class WindowDoc(serializers.Serializer[Any]):
    runs = serializers.IntegerField(help_text="final outcomes counted: succeeded + dead")
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField(help_text="dead (retries spent)")
    success_rate = serializers.FloatField(
        allow_null=True, help_text="succeeded / runs; null with no run"
    )
    p50_s = serializers.FloatField(allow_null=True, help_text="nearest-rank median duration")
    p95_s = serializers.FloatField(allow_null=True, help_text="nearest-rank 95th percentile")


class WindowsDoc(serializers.Serializer[Any]):
    locals()["24h"] = WindowDoc()
    locals()["7d"] = WindowDoc()
    locals()["30d"] = WindowDoc()


class LastAlertDoc(serializers.Serializer[Any]):
    kind = serializers.ChoiceField(choices=AlertKind.choices)
    sent_at = serializers.DateTimeField()


class AlertStateDoc(serializers.Serializer[Any]):
    failing = serializers.BooleanField(
        help_text="a failure alert went out and no success has followed yet"
    )
    snoozed_until = serializers.DateTimeField(
        allow_null=True, help_text="no alert is sent before this (null: not snoozed now)"
    )
    auto_paused = serializers.BooleanField(
        help_text="paused by the circuit breaker; stays paused until a person resumes it"
    )
    auto_pause_note = serializers.CharField(
        allow_null=True, help_text="the breaker's note (the failures and the last error)"
    )
    last_alert = LastAlertDoc(allow_null=True, help_text="the newest alert sent")


class HealthDoc(serializers.Serializer[Any]):
    last_run = LastRunDoc(
        allow_null=True, help_text="the newest occurrence that ran or was decided"
    )
    next_run_at = serializers.DateTimeField(allow_null=True)
    consecutive_failures = serializers.IntegerField(
        help_text="dead occurrences since the last success (skipped and cancelled ignored)"
    )
    consecutive_failures_capped = serializers.BooleanField(
        help_text=f"the streak reached the scan cap ({selectors.HEALTH_SCAN}): at least that many"
    )
    last_success_at = serializers.DateTimeField(allow_null=True)
    windows = WindowsDoc(help_text="by occurrence time, [now - window, now]")
    sampled = serializers.BooleanField(
        help_text=f"the windows cover only the newest {selectors.HEALTH_SCAN} counted runs"
    )
    alerts = AlertStateDoc(help_text="the current alert state")


class ScheduleWithHealthDoc(ScheduleOutDoc):
    health = HealthDoc()
