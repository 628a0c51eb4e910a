"""Managed commands' registrations, written by platform staff on the console's
operators pages (the Django admin edits the same rows).

A registration is checked by `ManagedCommand.full_clean()` — the model's fields and
`ManagedCommand.clean` (dispatch/targets/command_spec.py) — the one rule the admin
applies too. Registrations belong to the platform, not a tenant: their audit rows
have no tenant and name the staff account.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from dispatch.exceptions import InvalidSchedule, NotFound
from dispatch.models import ManagedCommand
from tenants.audit import audit_record
from tenants.models import Tenant

NAME_TAKEN = "a managed command with this name already exists"


def managed_command_problems(
    command: ManagedCommand, *, skip: Iterable[str] = ()
) -> dict[str, list[str]]:
    """Every problem of an unsaved registration, by field (empty when it is valid).

    `skip`: fields the caller could not even read (its own error says why); they are
    not checked, and what the model's cross-field check says about them is dropped.
    """
    skipped = set(skip)
    try:
        command.full_clean(exclude=skipped | {"tenants"})
    except ValidationError as exc:
        return {
            field: [str(m) for m in messages]
            for field, messages in exc.message_dict.items()
            if field not in skipped
        }
    return {}


def _view(command: ManagedCommand) -> dict[str, Any]:
    return {
        "name": command.name,
        "argv": command.argv,
        "env": command.env,
        "readable_paths": command.readable_paths,
        "writable_paths": command.writable_paths,
        "egress": command.egress,
        "enabled": command.enabled,
        "tenants": sorted(t.slug for t in command.tenants.all()) if command.pk else [],
    }


def _audit(actor: User, action: str, command: ManagedCommand, **change: Any) -> None:
    audit_record(
        actor=None,
        actor_kind="user",
        actor_id=str(actor.pk),
        actor_label=f"user:{actor.get_username()}",
        action=action,
        object_type="managed_command",
        object_id=str(command.pk),
        **change,
    )


@transaction.atomic
def managed_command_register(
    *, values: dict[str, Any], tenants: Iterable[Tenant], actor: User
) -> ManagedCommand:
    """A new registration (`values`: the model's fields but `tenants`; none = every tenant).
    InvalidSchedule, with every problem by field in `detail`, if it is not valid."""
    command = ManagedCommand(**values)
    problems = managed_command_problems(command)
    if problems:
        first = next(iter(problems))
        raise InvalidSchedule(f"{first}: {problems[first][0]}", detail=problems)
    try:
        with transaction.atomic():
            command.save()
    except IntegrityError:  # the name was taken since the check
        raise InvalidSchedule.field("name", NAME_TAKEN) from None
    command.tenants.set(list(tenants))
    _audit(actor, "command.register", command, after=_view(command))
    return command


@transaction.atomic
def managed_command_set_enabled(*, command_id: int, enabled: bool, actor: User) -> ManagedCommand:
    """Enable or disable a registration. A disabled one is refused when a schedule is
    saved and when a run starts (its runs fail: "not (or no longer) registered")."""
    command = ManagedCommand.objects.select_for_update().filter(pk=command_id).first()
    if command is None:
        raise NotFound("managed command not found")
    before = {"enabled": command.enabled}
    if command.enabled != enabled:
        command.enabled = enabled
        command.save(update_fields=["enabled"])
    _audit(
        actor,
        "command.enable" if enabled else "command.disable",
        command,
        before=before,
        after={"name": command.name, "enabled": command.enabled},
    )
    return command
