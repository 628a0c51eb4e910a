"""The workload-identity key ring's writes: the first key, made on first use, and
rotation (docs/how-to/workload-identity.md). Retired keys are never deleted here:
the JWKS stops publishing them on its own once their tokens have expired
(dispatch/selectors/identity.py), and the row stays as the record of the kid.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from core.db import db_clock, db_now
from dispatch.exceptions import StateConflict
from dispatch.identity import keys
from dispatch.models import IdentityKey
from dispatch.selectors import identity as ring
from dispatch.sql import sql


def key_ensure() -> IdentityKey:
    """The key that signs now, making the platform's first key if there is none."""
    with transaction.atomic():
        now = db_now()
        current = ring.signing_key(now)
        if current is not None:
            return current
        sql.one("identity_key_lock")
        # Read the wall clock (the transaction's stands still): a key another process
        # made while this one waited for the lock signs from a later instant than the
        # `now` read before it, and would otherwise be missed — two first keys, the
        # JWKS publishing both.
        now = db_clock()
        current = ring.signing_key(now)
        if current is not None:
            return current
        # Only a key made ahead may exist (the ring was emptied by hand): sign now
        # with a new one rather than refuse every token until then.
        return _create(signs_from=now)


def key_rotate(*, ahead_s: int) -> IdentityKey:
    """A new key that signs from `ahead_s` seconds on; the current one keeps signing
    until then and stays published until its last token has expired.

    Refused (StateConflict) while a key made ahead is still waiting to sign: a second
    one would take its place before any verifier had to trust it.
    """
    if ahead_s < 0:
        raise ValueError("ahead_s must be 0 or more")
    with transaction.atomic():
        sql.one("identity_key_lock")
        now = db_now()
        waiting = ring.next_key(now)
        if waiting is not None:
            raise StateConflict(
                f"key {waiting.kid} already waits to sign from {waiting.signs_from.isoformat()}; "
                "rotate again after that"
            )
        return _create(signs_from=now + timedelta(seconds=ahead_s))


def _create(*, signs_from: datetime) -> IdentityKey:
    made = keys.generate()
    return IdentityKey.objects.create(
        kid=made.kid,
        algorithm=keys.ALGORITHM,
        public_jwk=made.public_jwk,
        sealed_private_key=made.sealed_private_key,
        signs_from=signs_from,
    )
