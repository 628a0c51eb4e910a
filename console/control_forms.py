"""Forms of the console's run control: cancel, re-run, backfill and bulk actions.

Shape only (types, lengths, JSON, choices) — like console/forms.py. What an
action means (which states allow it, what a target may hold, how long a
backfill may be) is the services' to decide; their errors are shown on the
field they name."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast
from zoneinfo import ZoneInfo

from django import forms

from console.forms import parse_local
from core.api import inputs
from dispatch.models import Schedule
from dispatch.states import BackfillOrder, Reprocess

REASON_MAX = 500
# The target keys a re-run's edit may change for that run: the payload, and an
# HTTP call's headers. Everything else (url, method, command) stays the schedule's.
PAYLOAD_KEY = {"http": "body", "queue": "body", "command": "args"}
MAX_IDS = 1000  # a bulk request by ids (a page of checkboxes); more goes by filter


class CancelForm(forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX,
        required=False,
        label="Why (optional, shown in its timeline and the audit log)",
    )


class RerunForm(forms.Form):
    """An optional edited payload / headers for this run only (secret references only)."""

    payload = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
    )
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text='JSON object; a credential only as {"secret": "vault:…"} or {"secret": "env:…"}',
    )

    def __init__(self, data: Any = None, *, schedule: Schedule) -> None:
        self.schedule = schedule
        self.kind = str((schedule.target or {}).get("type", ""))
        self.payload_key = PAYLOAD_KEY.get(self.kind, "")
        target = schedule.target or {}
        initial: dict[str, str] = {}
        if self.payload_key and self.payload_key in target:
            initial["payload"] = _pretty(target[self.payload_key])
        if self.kind == "http":
            initial["headers"] = _pretty(target.get("headers") or {})
        super().__init__(data, initial=initial)
        if not self.payload_key:
            del self.fields["payload"]
        else:
            self.fields["payload"].label = f"Payload ({self.payload_key}, JSON)"
            self.fields["payload"].help_text = "empty: the schedule's"
        if self.kind != "http":
            del self.fields["headers"]

    def clean_payload(self) -> Any:
        return _json_field(self.cleaned_data.get("payload", ""), "payload")

    def clean_headers(self) -> Any:
        value = _json_field(self.cleaned_data.get("headers", ""), "headers")
        if value is not None and not isinstance(value, dict):
            raise forms.ValidationError("headers: must be a JSON object")
        return value

    def edited_target(self) -> dict[str, Any] | None:
        """The target of this run, or None when nothing differs from the schedule's."""
        base: dict[str, Any] = dict(self.schedule.target or {})
        target = dict(base)
        payload = self.cleaned_data.get("payload")
        if self.payload_key and payload is not None:
            target[self.payload_key] = payload
        headers = self.cleaned_data.get("headers")
        # `{}` for a target without headers is no edit; for one with headers it clears them.
        if self.kind == "http" and headers is not None and (headers or base.get("headers")):
            target["headers"] = headers
        return None if target == base else target


def carried(form: forms.Form) -> list[tuple[str, str]]:
    """A bound form's submitted values (repeated ones too, but not `confirm`), for
    the form behind a dry run's or review's confirm button to post again."""
    out: list[tuple[str, str]] = []
    for name in form.fields:
        if name == "confirm" or form.data.get(name) in (None, ""):
            continue
        values = form.data.getlist(name) if hasattr(form.data, "getlist") else [form.data[name]]
        out += [(name, str(v)) for v in values]
    return out


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _json_field(raw: str, name: str) -> Any:
    text = (raw or "").strip()
    if not text:
        return None
    try:
        # The API's JSON rules: depth, finite numbers, storable text.
        return inputs.loads_json(text, name)
    except inputs.InvalidInput as exc:
        raise forms.ValidationError(exc.message) from None


class BackfillForm(forms.Form):
    """A backfill's range and options; times are wall times in the schedule's zone."""

    range_from = forms.CharField(
        label="From (inclusive)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    range_to = forms.CharField(
        label="To (exclusive)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    reprocess = forms.ChoiceField(
        choices=[
            (Reprocess.NONE, "none: leave existing executions"),
            (Reprocess.FAILED, "failed: re-run those that ended dead, skipped or cancelled"),
            (Reprocess.ALL, "all: re-run every existing final execution"),
        ],
        initial=Reprocess.NONE,
        label="Existing executions",
    )
    # Its bound is the service's (a 400 naming max_concurrent).
    max_concurrent = forms.IntegerField(initial=1, label="At most this many at once")
    order = forms.ChoiceField(
        choices=[(BackfillOrder.OLDEST, "oldest first"), (BackfillOrder.NEWEST, "newest first")],
        initial=BackfillOrder.OLDEST,
    )
    skip_paused = forms.BooleanField(required=False, label="Skip the time the schedule was paused")
    confirm = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, zone: ZoneInfo, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.zone = zone
        suffix = f" — {zone.key}"
        for name in ("range_from", "range_to"):
            self.fields[name].label = f"{self.fields[name].label}{suffix}"

    def _instant(self, name: str) -> datetime:
        try:
            return parse_local(self.cleaned_data.get(name) or "", self.zone)
        except ValueError:
            raise forms.ValidationError(f"{_wire(name)}: is not a date and time") from None

    def clean_range_from(self) -> datetime:
        return self._instant("range_from")

    def clean_range_to(self) -> datetime:
        return self._instant("range_to")

    def carried(self) -> list[tuple[str, str]]:
        return carried(self)

    def service_params(self) -> dict[str, Any]:
        d = self.cleaned_data
        return {
            "range_from": d["range_from"],
            "range_to": d["range_to"],
            "reprocess": d["reprocess"],
            "max_concurrent": d["max_concurrent"],
            "order": d["order"],
            "skip_paused": bool(d.get("skip_paused")),
        }


def _wire(name: str) -> str:
    """The API's name of a form field (the services' errors name these)."""
    return {"range_from": "from", "range_to": "to"}.get(name, name)


# A service error's field → the backfill form field that shows it.
BACKFILL_ERROR_FIELDS = {
    "from": "range_from",
    "to": "range_to",
    "range": "range_to",
    "reprocess": "reprocess",
    "max_concurrent": "max_concurrent",
    "order": "order",
    "skip_paused": "skip_paused",
}


class IdsField(forms.Field):
    """Checked rows: repeated `ids` values, each a UUID; at most MAX_IDS."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[str]:
        values = value if isinstance(value, list | tuple) else ([value] if value else [])
        if len(values) > MAX_IDS:
            raise forms.ValidationError(
                f"ids: at most {MAX_IDS} at a time; use “all matching this filter”"
            )
        out: list[str] = []
        for raw in values:
            try:
                out.append(str(uuid.UUID(str(raw))))
            except ValueError:
                raise forms.ValidationError("ids: not an id") from None
        return list(dict.fromkeys(out))


class BulkForm(forms.Form):
    """A bulk action on the checked rows (`scope=ids`) or on every row of the
    list's filter (`scope=filter`); `confirm` is set by the review page's button."""

    ACTIONS: tuple[str, ...] = ()

    action = forms.ChoiceField(choices=[])
    scope = forms.ChoiceField(
        choices=[("ids", "the selected rows"), ("filter", "all matching this filter")],
        initial="ids",
        widget=forms.RadioSelect,
        label="Apply to",
    )
    ids = IdsField(required=False)
    reason = forms.CharField(max_length=REASON_MAX, required=False)
    confirm = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        action = cast(forms.ChoiceField, self.fields["action"])
        action.choices = [(a, a) for a in self.ACTIONS]

    def clean(self) -> dict[str, Any]:
        d = super().clean() or {}
        if d.get("scope") == "ids" and not d.get("ids") and "ids" not in self.errors:
            self.add_error("ids", "ids: select at least one row (or apply to all matching)")
        return d

    def service_filter(self) -> dict[str, Any]:
        """The list's filter under the service's names; no filter fields: everything."""
        return {}

    def targets(self) -> dict[str, Any]:
        """`ids=` or `filter=` for the bulk service, by the chosen scope."""
        if self.cleaned_data.get("scope") == "filter":
            return {"filter": self.service_filter()}
        return {"ids": self.cleaned_data.get("ids") or []}

    def carried(self) -> list[tuple[str, str]]:
        return carried(self)


class BulkSchedulesForm(BulkForm):
    ACTIONS = ("pause", "resume", "trigger", "delete")

    # The list's filter (schedules.html), carried along for scope=filter.
    q = forms.CharField(max_length=200, required=False)
    kind = forms.CharField(max_length=8, required=False)
    status = forms.CharField(max_length=8, required=False)
    until = forms.CharField(
        required=False,
        label="Paused until (optional, your time zone)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    def __init__(self, *args: Any, zone: ZoneInfo, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.zone = zone

    def service_filter(self) -> dict[str, Any]:
        """The list's filter under the service's names (GET /v1/schedules)."""
        d = self.cleaned_data
        flt: dict[str, Any] = {}
        if d.get("q"):
            flt["search"] = d["q"].strip()
        if d.get("kind"):
            flt["kind"] = d["kind"]
        paused = {"paused": True, "active": False}.get(d.get("status") or "")
        if paused is not None:
            flt["paused"] = paused
        return flt

    def clean_until(self) -> datetime | None:
        raw = self.cleaned_data.get("until") or ""
        if not raw:
            return None
        try:
            return parse_local(raw, self.zone)
        except ValueError:
            raise forms.ValidationError("until: is not a date and time") from None


class BulkExecutionsForm(BulkForm):
    """The runs page's bulk bar. Its filter is the runs page's, carried as that page
    shows it (times in the viewer's zone, the schedule as its resolved id)."""

    ACTIONS = ("cancel", "rerun")
    # The filters a bulk request can select by (the service's); the others the
    # runs page offers must not silently widen "all matching" to more runs.
    NARROWING_ONLY = ("error", "rerun")

    state = forms.CharField(max_length=400, required=False)
    schedule = forms.UUIDField(required=False)
    trigger = forms.CharField(max_length=400, required=False)
    error = forms.CharField(max_length=400, required=False)
    rerun = forms.CharField(max_length=8, required=False)

    def __init__(self, *args: Any, zone: ZoneInfo, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.zone = zone
        # "from" / "to" are the runs page's parameter names (not identifiers).
        for name in ("from", "to"):
            self.fields[name] = forms.CharField(max_length=40, required=False)

    def _instant(self, name: str) -> datetime | None:
        raw = str(self.cleaned_data.get(name) or "")
        if not raw:
            return None
        try:
            return parse_local(raw, self.zone)
        except ValueError:
            self.add_error(name, f"{name}: is not a date and time")
            return None

    def clean(self) -> dict[str, Any]:
        d = super().clean()
        d["from"], d["to"] = self._instant("from"), self._instant("to")
        if d.get("scope") == "filter":
            used = [name for name in self.NARROWING_ONLY if d.get(name)]
            if used:
                self.add_error(
                    "scope",
                    f"filter: {', '.join(used)} cannot pick a bulk action's runs; "
                    "select the rows instead",
                )
        return d

    def service_filter(self) -> dict[str, Any]:
        d = self.cleaned_data
        flt: dict[str, Any] = {}
        if d.get("state"):
            flt["state"] = d["state"]
        if d.get("schedule"):
            flt["schedule_id"] = str(d["schedule"])
        if d.get("trigger"):
            flt["trigger"] = d["trigger"]
        for name in ("from", "to"):
            if d.get(name):
                flt[name] = d[name]
        return flt


def apply_error(form: forms.Form, exc: Exception, field_of: Callable[[str], str | None]) -> None:
    """Put a service error (an AppError) on the form field its detail key names
    (`field_of(key)`); anything unplaced above the form."""
    message = str(getattr(exc, "message", exc))
    detail: dict[str, list[str]] = getattr(exc, "detail", None) or {}
    placed = False
    for key, reasons in detail.items():
        name = field_of(key)
        if name and name in form.fields:
            for reason in reasons:
                form.add_error(name, f"{key}: {reason}")
            placed = True
    if not placed:
        form.add_error(None, message)


def rerun_field(key: str) -> str | None:
    """`target.body` / `target.args` → payload, `target.headers…` → headers."""
    if key.startswith("target.headers"):
        return "headers"
    if key.split(".")[:2] in (["target", "body"], ["target", "args"]):
        return "payload"
    return None


def bulk_field(key: str) -> str | None:
    """`filter.search` → q, `ids` → ids, `reason` / `until` / `action` as they are."""
    if key.startswith("filter."):
        names = {"search": "q", "kind": "kind", "paused": "status", "schedule_id": "schedule"}
        own = key[7:] in ("state", "trigger", "from", "to")
        return names.get(key[7:], key[7:] if own else "scope")
    if key == "filter":
        return "scope"
    return key


def backfill_field(key: str) -> str | None:
    return BACKFILL_ERROR_FIELDS.get(key.split(".", 1)[0])


def named_errors(form: forms.Form) -> list[str]:
    """Every error of a bound form, each naming its field (`reason: …`) unless it already does."""
    out: list[str] = []
    for name, errors in form.errors.items():
        for error in errors:
            text = str(error)
            wire = _wire(name)
            out.append(
                text if name == "__all__" or text.startswith(f"{wire}:") else f"{wire}: {text}"
            )
    return out
