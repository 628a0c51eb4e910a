"""Schedules, executions (one per occurrence), their events, and scheduler partitions."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from dispatch.history.ids import ExecutionIdField
from dispatch.lifecycle import Completion, completion

# The vocabulary lives in dispatch.states; re-exported for the model's callers.
from dispatch.states import (
    AlertKind,
    AlertState,
    BackfillOrder,
    ChannelKind,
    ControlState,
    ItemStatus,
    Reprocess,
)
from dispatch.states import DurationClass as DurationClass
from dispatch.states import ExecutionState as ExecutionState
from dispatch.states import Kind as Kind
from dispatch.states import Misfire as Misfire
from dispatch.states import Overlap as Overlap
from dispatch.states import Priority as Priority
from dispatch.states import Trigger as Trigger
from tenants.models import Tenant


class Schedule(models.Model):
    """A cron schedule or a one-off job of a tenant.

    `next_run_at` and `partition` form the due index the beats scan;
    `version` is bumped on every change (optimistic concurrency for PATCH).
    Deleting is soft (`deleted_at`) so past executions keep their schedule.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # db_index=False: every index below that starts with tenant serves the FK too;
    # a separate one would only cost each write (hot path: the beat's advance).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="schedules", db_index=False
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # The whole timing as one text (dispatch/timing/cron.py): a cron expression, or
    # specs joined by " | " with optional start_at/end_at parts.
    cron = models.CharField(max_length=5000, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    run_at = models.DateTimeField(null=True, blank=True)
    target = models.JSONField()
    retry = models.JSONField(default=dict, blank=True)
    timeout_s = models.PositiveIntegerField(default=300)
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.DEFAULT)
    duration_class = models.CharField(
        max_length=8, choices=DurationClass.choices, default=DurationClass.SHORT
    )
    overlap = models.CharField(max_length=8, choices=Overlap.choices, default=Overlap.FORBID)
    misfire = models.CharField(max_length=10, choices=Misfire.choices, default=Misfire.SKIP)
    misfire_grace_s = models.PositiveIntegerField(default=60)
    catch_up_limit = models.PositiveIntegerField(default=10)
    jitter_s = models.PositiveIntegerField(default=0)
    depends_on = models.ManyToManyField(
        "self", symmetrical=False, related_name="dependents", blank=True
    )
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_until = models.DateTimeField(null=True, blank=True)
    paused_reason = models.CharField(max_length=500, blank=True)
    paused_by = models.CharField(max_length=200, blank=True)
    version = models.PositiveIntegerField(default=1)
    # A failure alert went out and no success has followed yet (set and cleared by the
    # alert decision, dispatch/sql/alerts.sql): read with the claim, so only a success
    # that may owe a recovery alert pays for deciding one.
    alert_failing = models.BooleanField(db_default=False)
    # No alert of this schedule is sent before this instant (its failures still count).
    alert_snoozed_until = models.DateTimeField(null=True, blank=True)
    # The occurrence at which the circuit breaker last paused this schedule: the next
    # auto-pause counts failures after it only (a person's resume starts afresh).
    breaker_tripped_for = models.DateTimeField(null=True, blank=True)
    # NULL, not "", for jobs without a key: the partial unique index ignores NULLs.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    request_digest = models.CharField(max_length=64, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    # One of the fixed logical partitions (dispatch/partitioning.py): written once, at creation.
    partition = models.PositiveSmallIntegerField()
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    created_by = models.CharField(max_length=200, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Lifecycle bounds (dispatch/lifecycle.py). `max_runs` counts SUCCEEDED occurrences:
    # `runs_succeeded` is a counter, not a count, bumped by the worker's fenced finish
    # statement only for schedules with a max_runs (Execution.counted keeps a re-run's
    # second success from counting twice). `completed_at`: when max_runs was reached.
    max_runs = models.PositiveIntegerField(null=True, blank=True)
    runs_succeeded = models.PositiveIntegerField(default=0, db_default=0)
    completed_at = models.DateTimeField(null=True, blank=True)
    # One-offs: removed (soft delete) by retention this long after their execution ended.
    delete_after = models.DurationField(null=True, blank=True)
    # Keyed concurrency (dispatch/concurrency_keys.py): {"key": template, "limit",
    # "on_conflict", "rendered"}, or NULL for none (nearly every row).
    concurrency_key = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=Q(deleted_at__isnull=True),
                name="schedule_name_unique_live",
            ),
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="schedule_idempotency_key_unique",
            ),
            models.CheckConstraint(
                condition=(Q(kind=Kind.CRON) & ~Q(cron=""))
                | (Q(kind=Kind.ONCE) & Q(run_at__isnull=False)),
                name="schedule_kind_fields",
            ),
            models.CheckConstraint(condition=Q(timeout_s__gte=1), name="schedule_timeout_positive"),
            models.CheckConstraint(
                condition=Q(priority__in=Priority.values), name="schedule_priority_valid"
            ),
            models.CheckConstraint(
                condition=Q(duration_class__in=DurationClass.values), name="schedule_duration_valid"
            ),
            models.CheckConstraint(
                condition=Q(overlap__in=Overlap.values), name="schedule_overlap_valid"
            ),
            models.CheckConstraint(
                condition=Q(misfire__in=Misfire.values), name="schedule_misfire_valid"
            ),
            models.CheckConstraint(condition=Q(version__gte=1), name="schedule_version_positive"),
            models.CheckConstraint(
                condition=Q(max_runs__isnull=True) | Q(max_runs__gte=1),
                name="schedule_max_runs_positive",
            ),
        ]
        indexes = [
            # The due index: each beat range-scans its partitions by time; only
            # live, unpaused schedules with a next occurrence are in it, so idle
            # and finished schedules cost the beat nothing.
            models.Index(
                fields=["partition", "next_run_at"],
                condition=Q(paused=False, deleted_at__isnull=True, next_run_at__isnull=False),
                name="schedule_due_index",
            ),
            models.Index(fields=["tenant", "-created_at", "-id"], name="schedule_tenant_created"),
            # Auto-resume, run on every sweep: only paused schedules are in it.
            models.Index(
                fields=["partition", "paused_until"],
                condition=Q(paused=True, deleted_at__isnull=True),
                name="schedule_paused_until",
            ),
            # Retention's delete_after pass: only live one-offs that asked to be removed.
            models.Index(
                fields=["run_at"],
                condition=Q(delete_after__isnull=False, deleted_at__isnull=True),
                name="schedule_delete_after",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    @property
    def completion(self) -> Completion | None:
        """Completed (max_runs reached, end_at passed) and why; None while it runs on."""
        return completion(self, now=timezone.now())


# The states the runs page's partial index holds: the ends other than success,
# and a retry's wait (the in-flight states have indexes of their own).
RUNS_UNSUCCESSFUL_STATES = [
    ExecutionState.FAILED,
    ExecutionState.RETRY_SCHEDULED,
    ExecutionState.TIMED_OUT,
    ExecutionState.DEAD,
    ExecutionState.SKIPPED,
    ExecutionState.CANCELLED,
]


class Execution(models.Model):
    """One occurrence of a schedule: UNIQUE(schedule, scheduled_for) makes firing idempotent.

    `fencing_token` is bumped by every claim and cancellation; every worker
    write is conditional on it, so a stale worker's write matches no row.
    """

    # Made from scheduled_for (dispatch/history/ids.py): the id names the day
    # partition that holds the row, and the archived day once it is gone.
    id = ExecutionIdField(primary_key=True, editable=False)
    # No single-column FK indexes: the unique (schedule, scheduled_for) and the
    # (tenant, scheduled_for, id) indexes serve the lookups and the FK checks, and
    # every extra index is paid on each of the beat's bulk inserts.
    schedule = models.ForeignKey(
        Schedule, on_delete=models.PROTECT, related_name="executions", db_index=False
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="executions", db_index=False
    )
    # Copied from the schedule so each beat scans only its own partitions' rows.
    partition = models.PositiveSmallIntegerField(db_default=0)
    scheduled_for = models.DateTimeField()
    due_at = models.DateTimeField()
    trigger = models.CharField(max_length=12, choices=Trigger.choices, default=Trigger.CRON)
    attempt = models.PositiveIntegerField(default=1)
    state = models.CharField(
        max_length=16, choices=ExecutionState.choices, default=ExecutionState.SCHEDULED
    )
    queue = models.CharField(max_length=32, blank=True, db_default="")
    lease_owner = models.CharField(max_length=200, blank=True, db_default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fencing_token = models.BigIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    enqueued_at = models.DateTimeField(null=True, blank=True)  # first published
    # Last time the sweep published it again because the broker lost it (queued,
    # unclaimed past QUEUED_REPUBLISH_S); a retry's normal publish is not one.
    republished_at = models.DateTimeField(null=True, blank=True)
    # Latest publish of any attempt: the lost-message timeout counts from it.
    published_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status_code = models.IntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True, db_default="")
    log_excerpt = models.TextField(blank=True, db_default="")
    # The run's result as its target reported it (a completion callback's `output`,
    # dispatch/completion.py): any JSON up to completion.MAX_OUTPUT_BYTES. NULL: none.
    output = models.JSONField(null=True, blank=True)
    reason_code = models.CharField(max_length=40, blank=True, db_default="")
    reason = models.CharField(max_length=500, blank=True, db_default="")
    # Which beat created the row, under which partition epoch: the evidence that
    # a fenced-out beat wrote nothing after losing its lease.
    fired_by = models.CharField(max_length=200, blank=True, db_default="")
    fired_epoch = models.BigIntegerField(null=True, blank=True)
    # Run control. A re-run continues the same row (the occurrence keeps its one
    # execution): `attempt` goes on counting, `attempt_base` is the attempt the
    # current chain started after, so retries count `attempt - attempt_base`.
    reruns = models.PositiveIntegerField(db_default=0)
    attempt_base = models.PositiveIntegerField(db_default=0)
    # The target of this run only (a re-run with an edited payload/headers);
    # NULL = the schedule's. Cleared by the next re-run.
    target_override = models.JSONField(null=True, blank=True)
    # The backfill that created or re-ran it (NULL for nearly every row: the
    # partial index below holds only backfill rows).
    # This occurrence's success was counted towards its schedule's max_runs: a re-run
    # that succeeds again (or a duplicate finish) must not count it twice.
    counted = models.BooleanField(default=False, db_default=False)
    backfill = models.ForeignKey(
        "Backfill",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="executions",
        db_index=False,
    )
    # The schedule's rendered concurrency key, written at admission: the rows holding a
    # key are the ones in KEY_HOLDING_STATES with it (partial index below). NULL, not "".
    concurrency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001

    class Meta:
        ordering = ["-scheduled_for", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "scheduled_for"], name="execution_one_per_occurrence"
            ),
            models.CheckConstraint(
                condition=Q(state__in=ExecutionState.values), name="execution_state_valid"
            ),
            models.CheckConstraint(condition=Q(attempt__gte=1), name="execution_attempt_positive"),
            models.CheckConstraint(
                condition=Q(due_at__gte=models.F("scheduled_for")),
                name="execution_due_after_nominal",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "-scheduled_for", "-id"], name="execution_tenant_sched"),
            # The sweeper's and the dispatcher's work lists: only non-final rows.
            models.Index(
                fields=["partition", "state", "due_at"],
                condition=Q(
                    state__in=[
                        ExecutionState.SCHEDULED,
                        ExecutionState.QUEUED,
                        ExecutionState.RETRY_SCHEDULED,
                    ]
                ),
                name="execution_pending",
            ),
            # Overlap and concurrency checks: the active rows of a schedule / tenant.
            models.Index(
                fields=["schedule"],
                condition=Q(
                    state__in=[
                        ExecutionState.SCHEDULED,
                        ExecutionState.QUEUED,
                        ExecutionState.RUNNING,
                        ExecutionState.RETRY_SCHEDULED,
                    ]
                ),
                name="execution_active_schedule",
            ),
            models.Index(
                fields=["tenant", "state"],
                condition=Q(state__in=[ExecutionState.QUEUED, ExecutionState.RUNNING]),
                name="execution_inflight_tenant",
            ),
            # The holders of a concurrency key (admission's key_holders): only rows that
            # have a key and hold it, so the firing path of keyless rows writes no entry.
            models.Index(
                fields=["tenant", "concurrency_key"],
                condition=Q(
                    concurrency_key__isnull=False,
                    state__in=[
                        ExecutionState.QUEUED,
                        ExecutionState.RUNNING,
                        ExecutionState.RETRY_SCHEDULED,
                    ],
                ),
                name="execution_key_holders",
            ),
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(state=ExecutionState.RUNNING),
                name="execution_running_lease",
            ),
            models.Index(
                fields=["backfill", "state"],
                condition=Q(backfill__isnull=False),
                name="execution_backfill",
            ),
            # /metrics and /ops read the last minutes of publishes and starts on every
            # scrape (dispatch/sql/ops.sql, ops_workers): range scans of these instead
            # of the whole table (migration 0014). Every published row gets an entry:
            # one more index write per publish and per start, against a full scan of
            # 10 M rows per scrape.
            models.Index(
                fields=["enqueued_at"],
                condition=Q(enqueued_at__isnull=False),
                name="execution_enqueued_at",
            ),
            models.Index(
                fields=["started_at"],
                condition=Q(started_at__isnull=False),
                name="execution_started_at",
            ),
            # The runs page's filters (migration 0011), each in the list's
            # (scheduled_for, id) order and partial, so the firing path (insert
            # scheduled, then queued, running, succeeded, all trigger=cron, no
            # error) adds no entry to any of them: only the rows they serve do.
            # The filtered column is INCLUDEd: the state (trigger) test is made on
            # the index entry, so the capped count is an index-only scan (measured
            # at 10 M rows: 5 ms instead of 90 for state=dead), and a list page
            # visits the heap only for the rows it shows.
            # What did not succeed, or carries an error (state and error-text filters):
            models.Index(
                fields=["tenant", "-scheduled_for", "-id"],
                include=["state"],
                condition=Q(state__in=RUNS_UNSUCCESSFUL_STATES) | ~Q(error=""),
                name="execution_runs_unsuccessful",
            ),
            # Everything not fired by cron (trigger filters: manual, api, backfill...).
            models.Index(
                fields=["tenant", "-scheduled_for", "-id"],
                include=["trigger"],
                condition=~Q(trigger=Trigger.CRON),
                name="execution_runs_trigger",
            ),
            # Re-run executions.
            models.Index(
                fields=["tenant", "-scheduled_for", "-id"],
                condition=Q(reruns__gt=0),
                name="execution_runs_rerun",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.state}"


class ExecutionEvent(models.Model):
    """The timeline of an execution, and decisions not to run (reason code + sentence + data).

    The explainer reads these; they are written by the service that made the decision.
    """

    # FK indexes come from the composite indexes below (written per attempt: keep them few).
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    schedule = models.ForeignKey(
        Schedule, on_delete=models.PROTECT, related_name="events", db_index=False
    )
    # No database constraint: a foreign key to a partitioned table must name its
    # whole key (id, scheduled_for). The ORM still cascades; retention drops an
    # execution's day with its events' (migration 0023).
    execution = models.ForeignKey(
        Execution,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="events",
        db_index=False,
        db_constraint=False,
    )
    at = models.DateTimeField(db_default=Now())
    # One of dispatch.states.EventKind (plain column: SQL writers insert kinds too).
    kind = models.CharField(max_length=40)
    message = models.CharField(max_length=1000)
    data = models.JSONField(default=dict, blank=True)
    actor = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["execution", "id"], name="event_execution"),
            models.Index(fields=["schedule", "at"], name="event_schedule_at"),
            models.Index(
                fields=["tenant", "at"], name="event_tenant_at"
            ),  # retention's range scans
        ]

    def __str__(self) -> str:
        return f"{self.at} {self.kind}"


class ArchivedDay(models.Model):
    """One UTC day of history written to object storage and dropped from the database
    (dispatch/history/archive.py): where its files are and what they hold, verified.
    An execution id carries its day (dispatch/history/ids.py), so a lookup of a gone
    execution comes here to learn whether and where it was archived."""

    day = models.DateField(primary_key=True)
    # The manifest's location (s3://bucket/prefix/... or file:///...): it lists every
    # file of the day with its rows and SHA-256.
    manifest = models.CharField(max_length=1000)
    executions = models.BigIntegerField()
    events = models.BigIntegerField()
    archived_at = models.DateTimeField(db_default=Now())
    # Set once both day partitions are detached and dropped.
    dropped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["day"]

    def __str__(self) -> str:
        return f"history of {self.day} archived at {self.manifest}"


class IdentityKey(models.Model):
    """One signing key of the platform's workload identity (dispatch/identity): the
    key that signs each run's OIDC token from `signs_from` until the next key's
    `signs_from`, published in the JWKS from its creation until the last token it
    signed has expired (dispatch/selectors/identity.py holds that rule).

    The private half is stored sealed (AES-GCM under WORKLOAD_IDENTITY_KEY_SECRET,
    dispatch/identity/keys.py): a database dump alone cannot mint a token."""

    kid = models.CharField(primary_key=True, max_length=64)
    algorithm = models.CharField(max_length=8)
    # The public half as a JWK (RFC 7517), exactly as the JWKS serves it.
    public_jwk = models.JSONField()
    sealed_private_key = models.BinaryField()
    signs_from = models.DateTimeField(unique=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["signs_from"]

    def __str__(self) -> str:
        return f"identity key {self.kid} ({self.algorithm}, signs from {self.signs_from})"


class SchedulerPartition(models.Model):
    """A range of the due index's logical partitions, leased by one beat at a time
    (dispatch/partitioning.py): it covers the schedules whose partition is in [lo, hi).

    `epoch` is the range's fencing token: bumped on every takeover; a beat's writes
    are conditional on the epoch it was granted.
    """

    number = models.PositiveSmallIntegerField(primary_key=True)
    owner = models.CharField(max_length=200, blank=True, db_default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    epoch = models.BigIntegerField(default=0)
    lo = models.PositiveSmallIntegerField(db_default=0)
    hi = models.PositiveSmallIntegerField(db_default=0)

    class Meta:
        ordering = ["number"]

    def __str__(self) -> str:
        return (
            f"partition range {self.number}: {self.lo}-{self.hi - 1} "
            f"({self.owner or 'free'}, epoch {self.epoch})"
        )


class ManagedCommand(models.Model):
    """An operator-registered command a tenant's schedule may run.

    `argv` is a list of strings; typed placeholders (`{day:date}`, `{n:int}`,
    `{file:path-under:/srv/exports}`, `{name}` = `{name:str}`; see
    dispatch/targets/command_spec.py) are filled from the schedule's args, each value
    checked against its type, inside one argv element — there is no shell. The
    command runs in a bwrap sandbox that sees only the system directories (read-only)
    and the paths declared here, with these limits.
    """

    name = models.CharField(max_length=100, unique=True)
    description = models.CharField(max_length=500, blank=True)
    argv = models.JSONField(help_text='e.g. ["/usr/local/bin/export", "--day", "{day:date}"]')
    tenants = models.ManyToManyField(Tenant, blank=True, help_text="empty = every tenant")
    timeout_s = models.PositiveIntegerField(default=3600)
    enabled = models.BooleanField(default=True)
    env = models.JSONField(
        default=list,
        blank=True,
        help_text='variables a schedule may set to secret references, e.g. ["API_TOKEN"]',
    )
    readable_paths = models.JSONField(
        default=list, blank=True, help_text="host directories the command sees read-only"
    )
    writable_paths = models.JSONField(
        default=list,
        blank=True,
        help_text="host directories the command may write (owned by the sandbox uid)",
    )
    egress = models.BooleanField(
        default=False,
        help_text="HTTP(S) out through the worker's proxy, under the tenant's egress policy "
        "and the SSRF guard (otherwise no network at all)",
    )
    cpu_s = models.PositiveIntegerField(default=300, help_text="CPU seconds (RLIMIT_CPU)")
    memory_mb = models.PositiveIntegerField(
        default=1024, help_text="address space and largest file, MiB (RLIMIT_AS, RLIMIT_FSIZE)"
    )
    max_procs = models.PositiveIntegerField(
        default=64, help_text="processes and threads of one run (RLIMIT_NPROC in its namespace)"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from dispatch.targets.command_spec import check_registration

        errors = check_registration(self.argv, self.env, self.readable_paths, self.writable_paths)
        for field, low in (("cpu_s", 1), ("memory_mb", 16), ("max_procs", 2)):
            if getattr(self, field) is not None and getattr(self, field) < low:
                errors[field] = f"must be at least {low}"
        if errors:
            raise ValidationError(errors)

    def parameters(self) -> list[str]:
        from dispatch.targets.command_spec import parse_template

        return list(parse_template(self.argv))

    def allowed_for(self, tenant: Tenant) -> bool:
        return not self.tenants.exists() or self.tenants.filter(pk=tenant.pk).exists()


class BeatNode(models.Model):
    """A running beat process: liveness for operators, counters for fencing evidence."""

    name = models.CharField(max_length=200, primary_key=True)
    hostname = models.CharField(max_length=200, blank=True)
    pid = models.IntegerField(default=0)
    started_at = models.DateTimeField(db_default=Now())
    heartbeat_at = models.DateTimeField(db_default=Now())
    partitions = models.JSONField(default=list, blank=True)
    stale_writes_rejected = models.BigIntegerField(default=0)
    fired_total = models.BigIntegerField(default=0)
    published_total = models.BigIntegerField(default=0)
    stopped_at = models.DateTimeField(null=True, blank=True)
    # Set while the beat stands by: it could not publish, handed its partitions over and
    # takes no part in the fair share until its broker answers again (scheduler/handover.py).
    standby_since = models.DateTimeField(null=True, blank=True)
    # Database default: beat_register's INSERT names its columns, old code's included.
    handovers_total = models.BigIntegerField(db_default=0)
    # Its publishes are failing (reported with each heartbeat): no taker for a hand-over.
    publish_failing = models.BooleanField(db_default=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AdmissionGrant(models.Model):
    """Slots of a capped tenant a beat has taken for the batch it is admitting.

    A beat takes them in a short transaction of their own, under the tenant's quota
    row (dispatch/scheduler/admission.py); each chunk's admission takes the slots it
    fills out of the grant in the commit that queues its rows, and what is left is
    released after the batch: the long admission then
    holds no quota row, so beats admit one tenant's burst side by side instead of in
    turns. Counted as in flight by every other admission and by a manual trigger.

    A grant lives while the range it names (`range_number` at `epoch`, owned by
    `beat`) does: a beat that dies between taking and using its slots leaks them
    only until its ranges are taken over (a new epoch), and the admitting
    transaction's fence keeps that epoch from moving while it runs.
    """

    beat = models.CharField(max_length=200)
    tenant_id = models.BigIntegerField()
    range_number = models.PositiveSmallIntegerField()
    epoch = models.BigIntegerField()
    slots = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant_id", "beat"], name="admission_grant_one")
        ]

    def __str__(self) -> str:
        return f"{self.beat}: {self.slots} of tenant {self.tenant_id}"


class Backfill(models.Model):
    """The occurrences a schedule would have had over [range_from, range_to), run now.

    `plan` is fixed when it is created — the dry run's answer, as
    [[scheduled_for ISO, action], ...] in the requested order — and `position`
    is how far the pump has gone; any beat's control pump may carry it on.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    schedule = models.ForeignKey(
        Schedule, on_delete=models.PROTECT, related_name="backfills", db_index=False
    )
    range_from = models.DateTimeField()
    range_to = models.DateTimeField()
    reprocess = models.CharField(max_length=8, choices=Reprocess.choices, default=Reprocess.NONE)
    skip_paused = models.BooleanField(default=False)
    max_concurrent = models.PositiveIntegerField(default=1)
    order = models.CharField(
        max_length=8, choices=BackfillOrder.choices, default=BackfillOrder.OLDEST
    )
    state = models.CharField(
        max_length=12, choices=ControlState.choices, default=ControlState.RUNNING
    )
    plan = models.JSONField(default=list)
    position = models.PositiveIntegerField(default=0)
    created = models.PositiveIntegerField(default=0)  # executions created
    rerun = models.PositiveIntegerField(default=0)  # existing executions re-run
    skipped = models.PositiveIntegerField(default=0)  # left alone (existing, paused time)
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["schedule", "-created_at"], name="backfill_schedule"),
            models.Index(
                fields=["created_at"],
                condition=Q(state=ControlState.RUNNING),
                name="backfill_running",
            ),
        ]

    def __str__(self) -> str:
        return f"backfill {self.id} {self.state}"


class Operation(models.Model):
    """A bulk action over schedules or executions, by filter (resolved to ids
    when it is created) or by ids; each item has its own result row."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+", db_index=False)
    object_type = models.CharField(max_length=12)  # "schedule" | "execution"
    action = models.CharField(max_length=16)
    params = models.JSONField(default=dict, blank=True)
    state = models.CharField(
        max_length=12, choices=ControlState.choices, default=ControlState.RUNNING
    )
    total = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    created_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="operation_tenant"),
            models.Index(
                fields=["created_at"],
                condition=Q(state=ControlState.RUNNING),
                name="operation_running",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.object_type}:{self.action} {self.id} {self.state}"


class OperationItem(models.Model):
    """One object of a bulk operation and what happened to it."""

    operation = models.ForeignKey(
        Operation, on_delete=models.CASCADE, related_name="items", db_index=False
    )
    position = models.PositiveIntegerField()
    object_id = models.CharField(max_length=64)
    status = models.CharField(max_length=12, choices=ItemStatus.choices, default=ItemStatus.PENDING)
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["operation", "position"]
        constraints = [
            models.UniqueConstraint(fields=["operation", "position"], name="operation_item_unique")
        ]

    def __str__(self) -> str:
        return f"{self.object_id} {self.status}"


class AlertChannel(models.Model):
    """Where a tenant's alerts go: an email list, a Slack-compatible or a signed webhook.

    `config` holds addresses and secret REFERENCES only (dispatch/alerting/channel_config.py
    validates it); the values behind the references are read at send time.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=12, choices=ChannelKind.choices)
    config = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            # Also the tenant's index: every read starts from the tenant.
            models.UniqueConstraint(fields=["tenant", "name"], name="alert_channel_name_unique")
        ]

    def __str__(self) -> str:
        return f"{self.kind} channel {self.name}"


class AlertPolicy(models.Model):
    """When a tenant's schedules alert: the tenant default (`schedule` null) or one
    schedule's override (a whole policy: it replaces the default, field by field)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    schedule = models.OneToOneField(
        Schedule, null=True, blank=True, on_delete=models.CASCADE, related_name="alert_policy"
    )
    # Alert on the Nth consecutive dead/timed_out occurrence (cancelled and skipped ones
    # neither count nor break the streak).
    failure_threshold = models.PositiveIntegerField(default=1)
    recovery = models.BooleanField(default=True)
    # While still failing, alert again on a failure at least this long after the last
    # failure alert (0: never).
    realert_s = models.PositiveIntegerField(default=0)
    # The circuit breaker: after this many consecutive failures (counted since the last
    # auto-pause) pause the schedule until a person resumes it (0: never).
    auto_pause_after = models.PositiveIntegerField(default=0)
    # Dead-man alerts: an occurrence not started this long after its due time, or still
    # running this long after it started (0: never).
    late_after_s = models.PositiveIntegerField(default=0)
    max_duration_s = models.PositiveIntegerField(default=0)
    # Where: these channels; none chosen means every enabled channel of the tenant.
    channels = models.ManyToManyField(AlertChannel, blank=True, related_name="+")
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"], condition=Q(schedule__isnull=True), name="alert_policy_default"
            )
        ]

    def __str__(self) -> str:
        return f"alert policy {'default' if self.schedule_id is None else self.schedule_id}"


class Alert(models.Model):
    """The alert outbox: one row per (schedule, occurrence, kind), written in the
    transaction that changed the execution, delivered by the control pump's sender
    (dispatch/alerting/outbox.py) with retries."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    schedule = models.ForeignKey(
        Schedule, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    # No database constraint: retention deletes old executions with plain SQL, and an
    # alert (its payload says what happened) may outlive the row it was about.
    execution = models.ForeignKey(
        Execution,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    scheduled_for = models.DateTimeField()
    kind = models.CharField(max_length=16, choices=AlertKind.choices)
    payload = models.JSONField(default=dict)
    state = models.CharField(max_length=12, choices=AlertState.choices, default=AlertState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # Channel ids that already took this alert: a retry sends only to the others.
    delivered = models.JSONField(default=list, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    # The maintenance window that held it: sent in that window's summary once it is over.
    held_by = models.CharField(max_length=100, blank=True, db_default="")
    created_at = models.DateTimeField(db_default=Now())
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "scheduled_for", "kind"], name="alert_dedup"
            )
        ]
        indexes = [
            # The sender's queue.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state=AlertState.PENDING),
                name="alert_pending",
            ),
            # The decision's "latest failure / recovery alert of this schedule".
            models.Index(fields=["schedule", "kind", "-scheduled_for"], name="alert_schedule_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} alert {self.id} {self.state}"


class MaintenanceWindow(models.Model):
    """A time when a tenant's alerts are held (and summarised after): a one-off range
    (`starts_at`..`ends_at`) or a recurring one (`cron` in `timezone`, open for
    `duration_s` from each occurrence)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=100)
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    cron = models.CharField(max_length=200, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    duration_s = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="maintenance_window_name")
        ]

    def __str__(self) -> str:
        return f"maintenance window {self.name}"


class Calendar(models.Model):
    """A tenant's named set of dates (dispatch/calendars.py validates and expands its
    `sources`). What it does is said by the schedule listing it: excluded dates
    (`exclude_calendars`) or the only dates that run (`only_calendars`).

    `expanded` is the sources' expansion for the planning years around the year
    `expanded_for`, made at save (and by the refresh once the year rolls over): the
    beat reads it and never expands sources in its firing transaction. NULL: not
    expanded yet (read as no dates until the refresh fills it).

    Deleting is soft, like schedules, so audit rows keep pointing at something;
    a calendar that a live schedule lists cannot be deleted."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=500, blank=True, db_default="")
    sources = models.JSONField(default=list)
    expanded = models.JSONField(null=True, blank=True)
    expanded_for = models.SmallIntegerField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    created_by = models.CharField(max_length=200, blank=True, db_default="")
    updated_by = models.CharField(max_length=200, blank=True, db_default="")
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["tenant", "name"]
        constraints = [
            # Also the tenant's index: every read starts from the tenant.
            models.UniqueConstraint(
                fields=["tenant", "name"],
                condition=Q(deleted_at__isnull=True),
                name="calendar_name_unique_live",
            )
        ]
        indexes = [
            # The refresh's look for live calendars expanded in an earlier year.
            models.Index(
                fields=["expanded_for"],
                condition=Q(deleted_at__isnull=True),
                name="calendar_expanded_for_live",
            )
        ]

    def __str__(self) -> str:
        return f"calendar {self.name}"


class ScheduleCalendar(models.Model):
    """A schedule's use of a calendar, in the order the definition lists it."""

    class Role(models.TextChoices):
        EXCLUDE = "exclude"
        ONLY = "only"

    schedule = models.ForeignKey(
        Schedule, on_delete=models.CASCADE, related_name="calendar_links", db_index=False
    )
    calendar = models.ForeignKey(Calendar, on_delete=models.PROTECT, related_name="schedule_links")
    role = models.CharField(max_length=8, choices=Role.choices)
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["schedule", "role", "position"]
        constraints = [
            # Also the index of the beat's one-query-per-batch load by schedule.
            models.UniqueConstraint(
                fields=["schedule", "role", "calendar"], name="schedule_calendar_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.role} {self.calendar_id} for {self.schedule_id}"
