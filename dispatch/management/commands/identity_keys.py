"""`python manage.py identity_keys [list]` shows the workload identity's key ring;
`identity_keys rotate [--ahead SECONDS]` adds the next key (dispatch/services/identity.py).

The new key is published at once and signs from `--ahead` seconds on (default: twice
the time a verifier may cache the key set); the current key signs until then and is
published until the last token it signed has expired. `--ahead 0` switches now, for a
key that must stop signing at once: verifiers that cached the key set may refuse the
new kid until they fetch the set again (docs/how-to/workload-identity.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.db import db_now
from dispatch.api.identity import JWKS_MAX_AGE_S
from dispatch.exceptions import StateConflict
from dispatch.selectors import identity as ring
from dispatch.services.identity import key_rotate


class Command(BaseCommand):
    help = "List or rotate the keys that sign the runs' workload identity tokens."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", nargs="?", choices=["list", "rotate"], default="list")
        parser.add_argument(
            "--ahead",
            type=int,
            default=2 * JWKS_MAX_AGE_S,
            help="seconds from now at which the new key starts signing (rotate)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["action"] == "rotate":
            if opts["ahead"] < 0:
                raise CommandError("--ahead must be 0 or more seconds")
            try:
                key = key_rotate(ahead_s=opts["ahead"])
            except StateConflict as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(
                f"key {key.kid} published; it signs from {key.signs_from.isoformat()}"
            )
        self._list()

    def _list(self) -> None:
        now = db_now()
        signing = ring.signing_key(now)
        published = {key.kid for key in ring.published_keys(now)}
        stored = ring.key_ring()
        if not stored:
            self.stdout.write("no key yet: the first run with target.auth makes one")
        for key in stored:
            if signing is not None and key.kid == signing.kid:
                state = "signing"
            elif key.signs_from > now:
                state = "next (published, not signing yet)"
            elif key.kid in published:
                state = "retired (published until its tokens expire)"
            else:
                state = "retired"
            self.stdout.write(
                f"{key.kid}  {key.algorithm}  signs from {key.signs_from.isoformat()}  {state}"
            )
