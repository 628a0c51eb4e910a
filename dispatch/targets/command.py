"""Managed commands: operator-registered argv templates (no shell), run by workers.

Definition: {"type": "command", "command": "<registered name>", "args": {"param": "value"}}.
"""

from __future__ import annotations

import re
from typing import Any

from dispatch.exceptions import InvalidSchedule
from dispatch.targets.common import clean_str, clean_timeout, require_keys
from tenants.models import Tenant

KEYS = {"type", "command", "args", "timeout_s"}
ARG_VALUE = re.compile(r"^[A-Za-z0-9_.,:=@+/-]{0,256}$")


def clean(config: dict[str, Any], *, tenant: Tenant) -> dict[str, Any]:
    from dispatch.models import ManagedCommand

    require_keys(config, allowed=KEYS)
    name = clean_str(config, "command", required=True, max_len=100)
    registered = ManagedCommand.objects.filter(name=name, enabled=True).first()
    if registered is None or not registered.allowed_for(tenant):
        raise InvalidSchedule.field(
            "target.command", f"no managed command {name!r} is registered for this tenant"
        )
    args = config.get("args", {})
    if not isinstance(args, dict):
        raise InvalidSchedule.field("target.args", "must be an object of parameter to value")
    params = set(registered.parameters())
    for key, value in args.items():
        if key not in params:
            raise InvalidSchedule.field(f"target.args.{key}", "is not a parameter of this command")
        # Values are substituted into argv as single arguments (never a shell),
        # and still kept to a conservative alphabet.
        if not isinstance(value, str) or not ARG_VALUE.match(value):
            raise InvalidSchedule.field(
                f"target.args.{key}", "must be a short string of letters, digits and _.,:=@+/-"
            )
    missing = sorted(params - set(args))
    if missing:
        raise InvalidSchedule.field(f"target.args.{missing[0]}", "is required by this command")
    timeout = clean_timeout(config, default=registered.timeout_s)
    if timeout > registered.timeout_s:
        raise InvalidSchedule.field(
            "target.timeout_s", f"this command allows at most {registered.timeout_s} s"
        )
    return {"type": "command", "command": name, "args": args, "timeout_s": timeout}
