"""Console forms: shape only (types, lengths, JSON). Meaning is checked by the
services (dispatch/schedule_fields.py), whose InvalidSchedule errors are put
back on the field they name. The one lookup here turns schedule names typed
into a picker into the ids the services take (a read, through the selectors)."""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django import forms
from django.conf import settings
from django.contrib.auth.forms import UserCreationForm
from django.core import signing

from console import target_editor
from core.api import inputs
from dispatch import selectors, services
from dispatch.concurrency_keys import OnConflict
from dispatch.models import DurationClass, ManagedCommand, Misfire, Overlap, Priority, Schedule
from dispatch.timing import cron, retry
from tenants.models import Tenant
from tenants.roles import Role

DEFAULT_TARGET = '{"type": "http", "url": "https://service.internal/hook", "method": "POST"}'


def default_target() -> str:
    """The new-schedule form's target: under `make run`, the demo receiver (a new
    user's first schedule then succeeds instead of failing on DNS); else a template."""
    if settings.DEMO_RECEIVER_URL:
        return json.dumps(
            {"type": "http", "url": f"{settings.DEMO_RECEIVER_URL}/ok", "method": "POST"}
        )
    return DEFAULT_TARGET


ROLE_CHOICES = [(r.label, r.label) for r in Role]
TARGET_TYPE_LABELS = {
    "http": "HTTP request",
    "queue": "queue message",
    "command": "managed command",
}

# Error keys of dispatch.exceptions.InvalidSchedule.detail → the form field that shows them.
ERROR_FIELDS = {
    "name": "name",
    "cron": "cron",
    "run_at": "run_at",
    "timezone": "timezone",
    "target": "target",
    "retry": "retry_max_attempts",
    "retry.max_attempts": "retry_max_attempts",
    "retry.backoff": "retry_backoff",
    "retry.initial_s": "retry_initial_s",
    "retry.max_s": "retry_max_s",
    "priority": "priority",
    "duration": "duration",
    "concurrency": "concurrency",
    "misfire": "misfire",
    "misfire_grace_s": "misfire_grace_s",
    "catch_up_limit": "catch_up_limit",
    "target.timeout_s": "timeout_s",
    "jitter_s": "jitter_s",
    "max_runs": "max_runs",
    "depends_on": "depends_on",
    "exclude_calendars": "exclude_calendars",
    "only_calendars": "only_calendars",
    "concurrency_key": "ckey_key",
    "concurrency_key.key": "ckey_key",
    "concurrency_key.limit": "ckey_limit",
    "concurrency_key.on_conflict": "ckey_on_conflict",
    "start_at": "start_at",
    "end_at": "end_at",
}


def _lines(raw: Any) -> list[str]:
    """Non-empty stripped lines, first occurrence of each kept."""
    out: list[str] = []
    for line in str(raw or "").splitlines():
        if line.strip() and line.strip() not in out:
            out.append(line.strip())
    return out


# The create form's hidden `preview_seed` becomes the new schedule's id, so the
# H values and jitter its live preview shows are the ones it keeps. The server
# issues it: a fresh random id, signed (salted, with an age limit), so a client
# can neither name an existing id (an existence oracle across tenants) nor pick
# ids to land in a partition of its choosing.
SEED_SALT = "console.schedule.preview_seed"
SEED_MAX_AGE_S = 24 * 3600
SEED_INVALID = "this form has expired or was altered; reload it"


def issue_seed() -> str:
    return signing.dumps(uuid.uuid4().hex, salt=SEED_SALT)


def read_seed(value: str) -> uuid.UUID | None:
    """The id inside a seed this server issued within SEED_MAX_AGE_S, else None."""
    try:
        return uuid.UUID(str(signing.loads(value, salt=SEED_SALT, max_age=SEED_MAX_AGE_S)))
    except (signing.BadSignature, ValueError, TypeError):
        return None


_SPEC_ERROR_RE = re.compile(r"^specs\[(\d+)\](?:\.(\w+))?$")
_INTERVAL_RE = re.compile(r"^every\s+(\S+)\s+from\s+(\S+)$")


def spec_line(spec: cron.Spec) -> str:
    """One line of the form's specs field: a cron expression or 'every … from …'."""
    if spec.cron is not None:
        return spec.cron
    return f"every {spec.every} from {spec.anchor}"


def line_spec(line: str) -> dict[str, Any]:
    """A line of the specs field as an API spec; a malformed interval line is sent as
    is so the service names the line's `every`."""
    if not line.startswith("every"):
        return {"cron": line}
    match = _INTERVAL_RE.match(line)
    if match is None:
        return {"every": line.removeprefix("every").strip(), "anchor": None}
    return {"every": match.group(1), "anchor": match.group(2)}


def error_label(key: str) -> str:
    """An error key as the form shows it: `specs[1].every` is line 2 of the specs field."""
    match = _SPEC_ERROR_RE.match(key)
    if match is None:
        return key
    part = f" ({match.group(2)})" if match.group(2) else ""
    return f"specs, line {int(match.group(1)) + 1}{part}"


def field_for_error(key: str) -> str | None:
    if key in ERROR_FIELDS:
        return ERROR_FIELDS[key]
    if key == "specs" or _SPEC_ERROR_RE.match(key):
        return "cron"
    if key.startswith("target."):
        return "target"
    return None


def parse_local(value: str, zone: ZoneInfo) -> datetime:
    """A `datetime-local` value (or an ISO instant with an offset) as an aware instant.

    A wall time without offset is read in `zone`; in a spring-forward gap it is
    read with the offset before the gap (fold=0), as the DST policy does.
    """
    text = value.strip().replace("Z", "+00:00")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=zone)
    try:
        # The same range as the API (core/api/inputs.py): later zone conversions
        # and cron arithmetic must not overflow.
        inputs.check_instant(parsed, "")
    except inputs.InvalidInput as exc:
        raise ValueError(exc.reason) from None
    return parsed


class ScheduleRefsWidget(forms.Textarea):
    """One schedule (name or id) per line. Repeated fields (`depends_on=<id>&depends_on=<id>`,
    as a multiple select posted) are read as lines too, so no value is ever dropped."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        if hasattr(data, "getlist"):
            values = data.getlist(name)
            return "\n".join(values) if values else None
        value = data.get(name)
        return "\n".join(value) if isinstance(value, list | tuple) else value


def _ckey_initial(definition: dict[str, Any] | None) -> dict[str, Any]:
    """The form's three concurrency-key fields from the definition's object (or none)."""
    if not definition:
        return {"ckey_key": "", "ckey_limit": 1, "ckey_on_conflict": OnConflict.QUEUE}
    return {
        "ckey_key": definition["key"],
        "ckey_limit": definition["limit"],
        "ckey_on_conflict": definition["on_conflict"],
    }


class ScheduleForm(forms.Form):
    name = forms.CharField(max_length=200)
    kind = forms.ChoiceField(
        choices=[("cron", "recurring (cron)"), ("once", "one-off")], initial="cron"
    )
    cron = forms.CharField(
        max_length=5000,
        required=False,
        label="Cron / specs (one per line)",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text="recurring only: one spec per line, their runs united — a cron expression "
        "(5 fields; H, H(a-b), H/n and @hourly…@yearly allowed) or an interval "
        "'every 90m from 2026-01-01T00:15' (elapsed time from a wall time in the time zone)",
    )
    start_at = forms.CharField(
        required=False,
        label="Start (optional)",
        help_text="recurring only: no run before this time (inclusive), in the schedule's time zone",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "60"}),
    )
    end_at = forms.CharField(
        required=False,
        label="End (optional)",
        help_text="recurring only: no run at or after this time (exclusive); then no next run",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "60"}),
    )
    run_at = forms.CharField(
        required=False,
        label="Run at",
        help_text="one-off only: a date and time in the schedule's time zone",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}),
    )
    timezone = forms.CharField(max_length=64, initial="UTC")
    # The target: structured fields per kind (console/target_editor.py) and the JSON box;
    # target_editor.source decides which one a submission means.
    target_type = forms.ChoiceField(
        choices=[(t, TARGET_TYPE_LABELS.get(t, t)) for t in target_editor.TYPES],
        required=False,
        label="Type",
    )
    target_method = forms.ChoiceField(
        choices=[(m, m) for m in target_editor.METHODS], required=False, label="Method"
    )
    target_url = forms.CharField(
        required=False,
        label="URL",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
    )
    target_broker = forms.CharField(
        required=False,
        label="Broker",
        help_text="empty: the default broker",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
    )
    target_exchange = forms.CharField(
        required=False,
        label="Exchange",
        help_text="empty: the default exchange (the routing key is then the queue's name)",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
    )
    target_routing_key = forms.CharField(
        required=False,
        label="Routing key",
        help_text="your tenant's namespace first: <tenant>.…",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
    )
    target_body_format = forms.ChoiceField(
        choices=[(target_editor.BODY_JSON, "JSON"), (target_editor.BODY_TEXT, "text")],
        required=False,
        label="Body is",
    )
    target_body = forms.CharField(
        required=False,
        strip=False,
        label="Body",
        help_text="empty: none; JSON is sent as application/json, text as text/plain",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
    )
    target_command = forms.CharField(
        required=False,
        label="Command",
        help_text="the name of a managed command registered for your tenant",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
    )
    target_args = forms.CharField(
        required=False,
        label="Arguments",
        help_text="one per line: parameter=value",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
    )
    target_env = forms.CharField(
        required=False,
        label="Environment",
        help_text="one per line: NAME=secret reference (vault:kv/<tenant>/path#key or env:NAME), "
        "never a secret's value",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
    )
    target = forms.CharField(
        required=False,
        label="Target (JSON)",
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        help_text='The whole target: {"type": "http"|"queue"|"command", …}; secrets only as '
        '{"secret": "vault:…"}. If you change this JSON, it is saved instead of the fields '
        "above; while it is as shown, the fields win and the keys they do not cover "
        "(auth, completion, heartbeat_s) are kept from it. Empty it to use the fields again.",
    )
    target_shown = forms.CharField(required=False, widget=forms.HiddenInput)
    timeout_s = forms.IntegerField(
        required=False,
        min_value=1,
        label="Timeout (s)",
        help_text="an attempt is stopped after this long; empty: the target's default",
    )
    retry_max_attempts = forms.IntegerField(
        initial=retry.DEFAULT_POLICY["max_attempts"], label="Max attempts"
    )
    retry_backoff = forms.ChoiceField(
        choices=[("exponential", "exponential"), ("fixed", "fixed")],
        initial=retry.DEFAULT_POLICY["backoff"],
        label="Backoff",
    )
    retry_initial_s = forms.IntegerField(
        initial=retry.DEFAULT_POLICY["initial_s"], label="First retry after (s)"
    )
    retry_max_s = forms.IntegerField(
        initial=retry.DEFAULT_POLICY["max_s"], label="Longest wait (s)"
    )
    priority = forms.ChoiceField(choices=Priority.choices, initial=Priority.DEFAULT)
    duration = forms.ChoiceField(choices=DurationClass.choices, initial=DurationClass.SHORT)
    concurrency = forms.ChoiceField(
        choices=Overlap.choices, initial=Overlap.FORBID, label="Overlap"
    )
    misfire = forms.ChoiceField(choices=Misfire.choices, initial=Misfire.SKIP)
    misfire_grace_s = forms.IntegerField(initial=60, label="Misfire grace (s)")
    catch_up_limit = forms.IntegerField(
        initial=10,
        required=False,
        label="Catch-up limit",
        help_text="catch_up only: at most this many missed runs are made up",
    )
    jitter_s = forms.IntegerField(initial=0, label="Jitter (s)")
    max_runs = forms.IntegerField(
        required=False,
        label="At most this many runs",
        help_text="recurring only: completed once this many runs have succeeded "
        "(failures do not count); empty: no limit",
    )
    # Keyed concurrency (the API's concurrency_key object); an empty key: none.
    ckey_key = forms.CharField(
        max_length=200,
        required=False,
        label="Concurrency key",
        help_text="optional: at most `limit` runs with this key at once, across all your "
        "schedules and jobs; fields of the definition in braces, e.g. "
        "customer-{target.body.customer_id} or {args.customer}",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
    )
    ckey_limit = forms.IntegerField(initial=1, required=False, label="Key limit")
    ckey_on_conflict = forms.ChoiceField(
        choices=OnConflict.choices,
        initial=OnConflict.QUEUE,
        required=False,
        label="When the key is taken",
        help_text="queue: wait for a holder to end; skip: record it skipped; "
        "replace: cancel the oldest holder",
    )
    depends_on = forms.CharField(
        required=False,
        label="Runs after (upstream schedules)",
        help_text="one schedule per line: its name or its id",
        widget=ScheduleRefsWidget(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
    )
    exclude_calendars = forms.CharField(
        required=False,
        label="Not on the dates of (calendars)",
        help_text="one calendar per line, by name: no run on a date it holds (local date)",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "autocomplete": "off"}),
    )
    only_calendars = forms.CharField(
        required=False,
        label="Only on the dates of (calendars)",
        help_text="one calendar per line, by name; empty: every date",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "autocomplete": "off"}),
    )
    version = forms.IntegerField(required=False, widget=forms.HiddenInput)
    preview_seed = forms.CharField(required=False, widget=forms.HiddenInput)

    def preview_seed_id(self) -> uuid.UUID | None:
        """The id the live preview used, so the saved schedule gets the H values it showed."""
        return read_seed(str(self.cleaned_data.get("preview_seed") or ""))

    def __init__(
        self, *args: Any, tenant: Tenant, schedule_id: uuid.UUID | None = None, **kwargs: Any
    ):
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        self.schedule_id = schedule_id
        if not self.initial.get("preview_seed") and not self.initial.get("version"):
            # A new schedule (an edit form keeps its schedule's id and carries no seed).
            self.initial["preview_seed"] = issue_seed()
            self.initial.setdefault("target", default_target())
        self.target_source = target_editor.source(self.data) if self.is_bound else ""
        rows: list[target_editor.HeaderRow] = []
        if self.is_bound:
            posted = [
                i
                for i in range(target_editor.MAX_HEADER_ROWS)
                if f"target_header_name_{i}" in self.data
            ]
            count = max(posted, default=-1) + 2  # one empty row to add a header
        else:
            shown = str(self.initial.get("target") or "")
            try:
                proposed = json.loads(shown)
            except ValueError:
                proposed = None
            values, rows = target_editor.initial(proposed)
            for key, value in values.items():
                self.initial.setdefault(key, value)
            self.initial["target_shown"] = target_editor.fingerprint(shown)
            count = len(rows) + 2
        self.header_count = min(count, target_editor.MAX_HEADER_ROWS)
        for i in range(self.header_count):
            n = i + 1
            self.fields[f"target_header_name_{i}"] = forms.CharField(
                required=False,
                label=f"Header {n}",
                widget=forms.TextInput(
                    attrs={
                        "spellcheck": "false",
                        "autocomplete": "off",
                        "aria-label": f"Header {n}",
                    }
                ),
            )
            self.fields[f"target_header_kind_{i}"] = forms.ChoiceField(
                choices=[(target_editor.TEXT, "text"), (target_editor.SECRET, "secret reference")],
                required=False,
                label=f"Header {n} value is",
                widget=forms.Select(attrs={"aria-label": f"Header {n} value is"}),
            )
            self.fields[f"target_header_value_{i}"] = forms.CharField(
                required=False,
                label=f"Header {n} value",
                widget=forms.TextInput(
                    attrs={
                        "spellcheck": "false",
                        "autocomplete": "off",
                        "aria-label": f"Header {n} value",
                    }
                ),
            )
            if i < len(rows):
                self.initial.setdefault(f"target_header_name_{i}", rows[i].name)
                self.initial.setdefault(f"target_header_kind_{i}", rows[i].kind)
                self.initial.setdefault(f"target_header_value_{i}", rows[i].value)

    def header_rows(self) -> list[tuple[forms.BoundField, forms.BoundField, forms.BoundField]]:
        """The header rows' bound fields (name, value is, value), for the template."""
        return [
            (
                self[f"target_header_name_{i}"],
                self[f"target_header_kind_{i}"],
                self[f"target_header_value_{i}"],
            )
            for i in range(self.header_count)
        ]

    def header_values(self) -> list[target_editor.HeaderRow]:
        """The header rows as submitted (cleaned), in order."""
        d = self.cleaned_data
        return [
            target_editor.HeaderRow(
                name=(d.get(f"target_header_name_{i}") or "").strip(),
                kind=d.get(f"target_header_kind_{i}") or target_editor.TEXT,
                value=d.get(f"target_header_value_{i}") or "",
            )
            for i in range(self.header_count)
        ]

    def json_open(self) -> bool:
        """The JSON view opens when it is what the submission used, or shows an error."""
        return self.target_source == target_editor.JSON or bool(
            self.is_bound and self["target"].errors
        )

    def error_field(self, key: str) -> str | None:
        """The field that shows a service error naming `key`: with the structured fields
        used, the target's errors go on those fields (what they do not cover stays on the
        JSON); with the JSON used, on the JSON box, as before."""
        if self.target_source == target_editor.FIELDS and hasattr(self, "cleaned_data"):
            placed = target_editor.error_field(key, self.header_values())
            if placed is not None:
                return placed
        return field_for_error(key)

    def ignored_fields(self) -> set[str]:
        """Fields of the other kind (or of another misfire policy) in a submission: the
        form may show them (no JS, no CSS :has), but their values mean nothing here."""
        if not self.is_bound:
            return set()
        ignored = (
            {"run_at"}
            if self.data.get("kind", "cron") == "cron"
            else {"cron", "start_at", "end_at", "max_runs"}
        )
        if self.data.get("misfire") != "catch_up":
            ignored.add("catch_up_limit")
        return ignored

    def full_clean(self) -> None:
        # A disabled field takes its initial value and is never validated: what was typed
        # into a field of the other kind cannot make the form invalid nor be saved.
        ignored = self.ignored_fields()
        for name in ignored:
            self.fields[name].disabled = True
        try:
            super().full_clean()
        finally:
            for name in ignored:
                self.fields[name].disabled = False

    LIVE_FIELDS = (
        "name", "kind", "cron", "run_at", "timezone", "jitter_s", "target",
        "exclude_calendars", "only_calendars", "start_at", "end_at",
    )  # fmt: skip

    def live(self, url: str) -> None:
        """Validate and preview as the user types: each input posts the form (htmx, CSRF header)."""
        structured = [n for n in self.fields if n.startswith("target_") and n != "target_shown"]
        for name in (*self.LIVE_FIELDS, *structured):
            attrs = self.fields[name].widget.attrs
            attrs["hx-post"] = url
            attrs["hx-trigger"] = (
                "change"
                if isinstance(self.fields[name].widget, forms.Select)
                else "keyup changed delay:300ms, change"
            )
            attrs["hx-target"] = "#preview"
            attrs["hx-swap"] = "innerHTML"
            # The latest edit wins: an earlier answer still on its way (from a field left
            # a moment before) is dropped rather than painted over the newer one.
            attrs["hx-sync"] = "#preview:replace"
        self.fields["timezone"].widget.attrs["list"] = "zones"
        self.fields["timezone"].widget.attrs["autocomplete"] = "off"
        self.fields["cron"].widget.attrs["autocomplete"] = "off"

    @classmethod
    def initial_from(cls, schedule: Schedule) -> dict[str, Any]:
        pol = retry.policy(schedule.retry)
        run_at = ""
        if schedule.run_at is not None:
            local = schedule.run_at.astimezone(cron.get_zone(schedule.timezone))
            run_at = local.replace(tzinfo=None).isoformat(timespec="seconds")
        fields = selectors.schedule_fields(schedule)
        specs, start_at, end_at = (
            cron.decompose(schedule.cron) if schedule.cron else ([], None, None)
        )
        zone = cron.get_zone(schedule.timezone)

        def wall(value: datetime | None) -> str:
            if value is None:
                return ""
            return value.astimezone(zone).replace(tzinfo=None).isoformat(timespec="minutes")

        return fields | {
            "cron": "\n".join(spec_line(spec) for spec in specs),
            "start_at": wall(start_at),
            "end_at": wall(end_at),
            "run_at": run_at,
            # timeout_s has its own field: the JSON shows the rest of the target.
            "target": json.dumps(
                {k: v for k, v in (schedule.target or {}).items() if k != "timeout_s"}, indent=1
            ),
            "timeout_s": schedule.timeout_s,
            "retry_max_attempts": pol["max_attempts"],
            "retry_backoff": pol["backoff"],
            "retry_initial_s": pol["initial_s"],
            "retry_max_s": pol["max_s"],
            # Every live upstream, by name (no cap: what is not shown would be dropped on save).
            "depends_on": "\n".join(
                schedule.depends_on.filter(deleted_at__isnull=True)
                .order_by("name")
                .values_list("name", flat=True)
            ),
            # Calendars by name, one per line (schedule_fields lists them in order).
            "exclude_calendars": "\n".join(fields["exclude_calendars"]),
            "only_calendars": "\n".join(fields["only_calendars"]),
            **_ckey_initial(fields["concurrency_key"]),
            "version": schedule.version,
        }

    def clean_exclude_calendars(self) -> list[str]:
        return _lines(self.cleaned_data.get("exclude_calendars"))

    def clean_only_calendars(self) -> list[str]:
        return _lines(self.cleaned_data.get("only_calendars"))

    def clean_target(self) -> dict[str, Any] | None:
        raw = self.cleaned_data.get("target") or ""
        if self.target_source == target_editor.FIELDS:
            # Not edited: only its keys the fields do not cover are read (in clean).
            try:
                shown = inputs.loads_json(raw, "target") if raw.strip() else None
            except inputs.InvalidInput:
                return None
            return shown if isinstance(shown, dict) else None
        if not raw.strip():
            raise forms.ValidationError(self.fields["target"].error_messages["required"])
        try:
            # The API's JSON rules: depth, finite numbers, storable text.
            value = inputs.loads_json(raw, "target")
        except inputs.InvalidInput as exc:
            raise forms.ValidationError(exc.message) from None
        if not isinstance(value, dict):
            raise forms.ValidationError('target: must be a JSON object, e.g. {"type": "http", …}')
        return value

    def clean_depends_on(self) -> list[str]:
        """The upstream schedules typed, as ids; an unknown one is an error on the field."""
        raw = self.cleaned_data.get("depends_on") or ""
        ids: list[str] = []
        unknown: list[str] = []
        for line in raw.splitlines():
            ref = line.strip()
            if not ref:
                continue
            found = selectors.schedule_resolve(tenant=self.tenant, ref=ref)
            if found is None:
                unknown.append(ref)
            elif found.id == self.schedule_id:
                raise forms.ValidationError("depends_on: a schedule cannot depend on itself")
            elif str(found.id) not in ids:
                ids.append(str(found.id))
        if unknown:
            shown = ", ".join(repr(u[:80]) for u in unknown[:3])
            raise forms.ValidationError(f"depends_on: no schedule with the name or id {shown}")
        return ids

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        # Empty (no preview was shown) lets the service pick the id; anything else
        # must be a seed this server issued: one answer for every other value.
        # Shown above the form, as the field is hidden.
        seed = str(data.get("preview_seed") or "")
        if seed and read_seed(seed) is None:
            self.add_error(None, f"preview_seed: {SEED_INVALID}")
        if self.target_source == target_editor.FIELDS:
            # The target from the structured fields; the services validate it as any other.
            try:
                data["target"] = target_editor.from_fields(
                    data, self.header_values(), base=data.get("target")
                )
            except target_editor.Problems as problems:
                for name, message in problems.errors.items():
                    self.add_error(name, message)
        kind = data.get("kind")
        if kind == "cron" and not (data.get("cron") or "").strip():
            self.add_error("cron", "cron: is required for a recurring schedule")
        if kind == "cron":
            try:
                zone = cron.get_zone(data.get("timezone") or "UTC")
            except cron.CronError:
                zone = ZoneInfo("UTC")
            for key in ("start_at", "end_at"):
                raw = (data.get(key) or "").strip()
                if not raw:
                    data[f"{key}_instant"] = None
                    continue
                try:
                    data[f"{key}_instant"] = parse_local(raw, zone)
                except ValueError as exc:
                    self.add_error(key, f"{key}: is not a date and time in range ({exc})")
        if kind == "once":
            raw = (data.get("run_at") or "").strip()
            if not raw:
                self.add_error("run_at", "run_at: is required for a one-off job")
            else:
                try:
                    zone = cron.get_zone(data.get("timezone") or "UTC")
                except cron.CronError:
                    zone = ZoneInfo("UTC")
                try:
                    data["run_at_instant"] = parse_local(raw, zone)
                except ValueError as exc:
                    self.add_error("run_at", f"run_at: is not a date and time in range ({exc})")
        return data

    def to_service_data(self) -> dict[str, Any]:
        """The definition in the services' vocabulary (the API's field names)."""
        d = self.cleaned_data
        target = dict(d["target"])
        if d.get("timeout_s") is not None:
            target["timeout_s"] = d["timeout_s"]
        data: dict[str, Any] = {
            "name": d["name"],
            "timezone": (d.get("timezone") or "UTC").strip(),
            "target": target,
            "retry": {
                "max_attempts": d["retry_max_attempts"],
                "backoff": d["retry_backoff"],
                "initial_s": d["retry_initial_s"],
                "max_s": d["retry_max_s"],
            },
            "priority": d["priority"],
            "duration": d["duration"],
            "concurrency": d["concurrency"],
            "misfire": d["misfire"],
            "misfire_grace_s": d["misfire_grace_s"],
            "jitter_s": d["jitter_s"],
            "depends_on": list(d.get("depends_on") or []),
            # Names: the service resolves them (unknown → an error on the field).
            "exclude_calendars": list(d.get("exclude_calendars") or []),
            "only_calendars": list(d.get("only_calendars") or []),
        }
        key = (d.get("ckey_key") or "").strip()
        data["concurrency_key"] = (
            {
                "key": key,
                "limit": 1 if d.get("ckey_limit") is None else d["ckey_limit"],
                "on_conflict": d.get("ckey_on_conflict") or OnConflict.QUEUE,
            }
            if key
            else None
        )
        # Only catch_up uses the limit; otherwise the stored (or default) one is kept.
        if d.get("misfire") == "catch_up" and d.get("catch_up_limit") is not None:
            data["catch_up_limit"] = d["catch_up_limit"]
        if d.get("kind") == "once":
            data["run_at"] = d.get("run_at_instant")
            data["cron"] = None
        else:
            lines = [line.strip() for line in (d.get("cron") or "").splitlines() if line.strip()]
            if len(lines) == 1 and not lines[0].startswith("every"):
                data["cron"] = lines[0]  # one cron: errors say "cron", as before specs
            else:
                data["cron"] = None
                data["specs"] = [line_spec(line) for line in lines]
            data["start_at"] = d.get("start_at_instant")
            data["end_at"] = d.get("end_at_instant")
            data["run_at"] = None
            data["max_runs"] = d.get("max_runs")
        return data


class PauseForm(forms.Form):
    reason = forms.CharField(max_length=500, required=False)
    until = forms.CharField(
        required=False,
        label="Until (optional, your time zone)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial="viewer")
    expires_at = forms.CharField(
        required=False,
        label="Expires (optional, your time zone)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial="viewer")


class InviteForm(forms.Form):
    """On the members page beside the add-member form, hence its prefix (ids differ)."""

    prefix = "invite"
    invitee = forms.CharField(max_length=254, label="Email or username")
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial="viewer")


class InviteAcceptForm(UserCreationForm):  # type: ignore[type-arg]
    """A new account from an invitation link: Django's own checks (the username's
    characters and that nobody has it, in any case; the password validators)."""


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES)


class LinesField(forms.CharField):
    """A list of strings, one a line (blank lines dropped, each line stripped)."""

    widget = forms.Textarea(attrs={"rows": 3})

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        return [line.strip() for line in text.splitlines() if line.strip()]


class ManagedCommandForm(forms.Form):
    """A managed command's registration, on the operators' page. The form reads the
    values (JSON argv, one name or path a line, numbers); whether they make a valid
    registration is the model's check (`services.managed_command_problems`, the one
    the Django admin runs too), run here on every field that could be read, so one
    submission names every wrong field. Every error starts with its field's name."""

    name = forms.CharField(max_length=100)
    description = forms.CharField(max_length=500, required=False)
    argv = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="a JSON list: the absolute program, then its arguments with typed "
        'placeholders, e.g. ["/usr/local/bin/export", "--day", "{day:date}"]',
    )
    tenants = forms.ModelMultipleChoiceField(
        queryset=Tenant.objects.order_by("slug"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="the tenants whose schedules may run it; none ticked: every tenant",
    )
    timeout_s = forms.IntegerField(initial=3600, label="Timeout (s)")
    env = LinesField(
        required=False,
        help_text="variables a schedule may set to secret references, one a line",
    )
    readable_paths = LinesField(
        required=False, help_text="host directories the command sees read-only, one a line"
    )
    writable_paths = LinesField(
        required=False,
        help_text="host directories the command may write (owned by the sandbox uid), one a line",
    )
    egress = forms.BooleanField(
        required=False,
        help_text="HTTP(S) out through the worker's proxy under the tenant's egress policy "
        "(otherwise no network at all)",
    )
    cpu_s = forms.IntegerField(initial=300, label="CPU seconds")
    memory_mb = forms.IntegerField(initial=1024, label="Memory (MiB)")
    max_procs = forms.IntegerField(initial=64, label="Processes")

    MODEL_FIELDS = (
        "name",
        "description",
        "argv",
        "timeout_s",
        "env",
        "readable_paths",
        "writable_paths",
        "egress",
        "cpu_s",
        "memory_mb",
        "max_procs",
    )

    def clean_argv(self) -> Any:
        try:
            return json.loads(self.cleaned_data["argv"])
        except ValueError as exc:
            raise forms.ValidationError(f"is not valid JSON ({exc})") from None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        unread = set(self.errors)
        command = ManagedCommand(
            **{f: data[f] for f in self.MODEL_FIELDS if f in data and f not in unread}
        )
        for field, problems in services.managed_command_problems(command, skip=unread).items():
            for problem in problems:
                self.add_error(field if field in self.fields else None, problem)
        return data

    def full_clean(self) -> None:
        super().full_clean()
        for name, errors in self.errors.items():
            errors.data = [m if str(m).startswith(f"{name}: ") else f"{name}: {m}" for m in errors]

    def values(self) -> dict[str, Any]:
        """The model's fields from a valid form (tenants apart)."""
        return {f: self.cleaned_data[f] for f in self.MODEL_FIELDS}
