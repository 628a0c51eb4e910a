"""The worker's checks between the claim and the call: may this attempt call its
target now?

`rate_limit` takes the attempt's slot on its target host (waiting briefly in
place, or handing the attempt back until its turn); `lease_held` confirms, as the
last step before the call, that the claim's lease is still ours. Both record what
they decided (a `held_rate_limit` entry, a rejected `call`) so the runner only
branches on the answer.
"""

from __future__ import annotations

import logging
import time
from types import ModuleType

from django.conf import settings

from dispatch.worker import leases, ratelimit
from dispatch.worker.leases import Claim

log = logging.getLogger("dispatch.worker")

# A rate-limit slot at most this far off is waited for in place (capped at a third
# of the lease); a later one hands the attempt back until then.
RATE_LIMIT_INLINE_S = 1.0


def lease_held(claim: Claim, *, lease_s: float) -> bool:
    """The last check before the call: is the claim's lease still ours?

    Failure contract C2 and C5 (docs/explanation/failure-contract.md).

    A claim whose reply came late may already be revoked — swept and run by
    another worker — and the call would then be a duplicate under a stale token.
    A lost lease makes no call; it is recorded as a rejected `call`.
    """
    if leases.lease_check(claim=claim, lease_s=lease_s):
        return True
    leases.fencing_rejected(claim=claim, what="call", data={"not_run": True})
    log.warning(
        "execution %s: lease lost before the call (token %s no longer current); not run",
        claim.execution_id,
        claim.fencing_token,
    )
    return False


def rate_limit(claim: Claim, module: ModuleType, *, lease_s: float) -> tuple[bool, float]:
    """Take the attempt's slot on its target host: (handed back, seconds waited in place).

    A slot close enough is waited for here, holding the claim (well within the
    lease, before any heartbeat is needed). A later one hands the attempt back
    until then, once: the slot stays reserved for it, so on re-delivery it goes
    at once instead of queueing again.
    """
    key = module.rate_key(claim.target)
    if not key:
        return False, 0.0
    inline = min(RATE_LIMIT_INLINE_S, lease_s / 3)
    slot = ratelimit.reserve(key, ticket=f"{claim.execution_id}:{claim.attempt}", inline_s=inline)
    if not slot.hold:
        if slot.wait_s > 0:
            time.sleep(slot.wait_s)
        return False, slot.wait_s
    host = key.split(":", 1)[1]
    message = (
        f"waiting: host {host} at its rate limit ({settings.TARGET_RATE_PER_HOST}); "
        f"attempt {claim.attempt} held {slot.wait_s:.2f} s for its turn, not consumed"
    )
    applied = leases.rate_limit_hold(
        claim=claim,
        delay_s=slot.wait_s,
        message=message,
        data={"host": host, "delay_s": round(slot.wait_s, 3), "attempt": claim.attempt},
    )
    if not applied:
        leases.fencing_rejected(claim=claim, what="rate-limit hold")
    return True, slot.wait_s
