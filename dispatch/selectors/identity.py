"""The workload-identity key ring's reads: which key signs now, which keys the JWKS
publishes (dispatch/identity).

One rule for both: keys are ordered by `signs_from`; a key signs from its
`signs_from` until the next key's. It is published from its creation (a key made
ahead is published before it signs, so verifiers that cache the key set have it in
time) until every token it can have signed has expired: its successor's `signs_from`
plus the longest token lifetime plus how long a worker may keep using a key it
looked up (`SIGNER_CACHE_S`). The ring is read on the primary: a replica's lag would
hide a key from the JWKS that a worker already signs with.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import zip_longest

from dispatch.models import IdentityKey

# A token lives at most this long (and never longer than its attempt's timeout).
MAX_TOKEN_LIFETIME_S = 3600
# A worker looks the signing key up again at least this often.
SIGNER_CACHE_S = 60


def signing_key(now: datetime) -> IdentityKey | None:
    """The key that signs at `now`: the newest whose `signs_from` has come."""
    return IdentityKey.objects.filter(signs_from__lte=now).order_by("-signs_from").first()


def next_key(now: datetime) -> IdentityKey | None:
    """A key made ahead that has not started signing yet, if any."""
    return IdentityKey.objects.filter(signs_from__gt=now).order_by("signs_from").first()


def published_keys(now: datetime) -> list[IdentityKey]:
    ring = list(IdentityKey.objects.order_by("signs_from"))
    keep = timedelta(seconds=MAX_TOKEN_LIFETIME_S + SIGNER_CACHE_S)
    published = []
    for key, successor in zip_longest(ring, ring[1:]):
        if successor is None or successor.signs_from > now - keep:
            published.append(key)
    return published


def key_ring() -> list[IdentityKey]:
    """Every stored key, oldest first (the operators' listing)."""
    return list(IdentityKey.objects.order_by("signs_from"))
