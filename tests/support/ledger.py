"""The tests' ledger: bench.receiver's loopback receiver, recording every request.

One implementation serves the benchmark and the tests; the tests' receiver keeps
each request (`requests`, `effects`: the effect applied once per X-Execution-Id)
and closes each connection after its reply.
"""

from __future__ import annotations

from typing import Any

from bench.receiver import Receiver, Respond, ok

__all__ = ["Ledger", "Respond", "calls_under_revoked_token", "ok"]


class Ledger(Receiver):
    def __init__(self, respond: Respond | None = None) -> None:
        super().__init__(respond, record=True, keep_alive=False)

    def __enter__(self) -> Ledger:
        return self


def calls_under_revoked_token(
    requests: list[dict[str, Any]], bumps: dict[str, list[tuple[float, int]]]
) -> list[str]:
    """`execution id@token` of every effect call the target saw after that execution's
    fencing token had moved past the one the call carries. `bumps`: per execution id,
    (when, new token) of each claim or sweep, by the database clock (the ledger stamps
    arrivals with the same host's clock)."""
    revoked = []
    for req in requests:
        headers = {k.lower(): v for k, v in req["headers"].items()}
        eid, token = headers.get("x-execution-id", ""), headers.get("x-fencing-token", "")
        if not req["path"].startswith("/effect") or not token.isdigit():
            continue
        if any(at < req["at"] and newer > int(token) for at, newer in bumps.get(eid, [])):
            revoked.append(f"{eid}@{token}")
    return revoked
