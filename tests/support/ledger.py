"""The tests' ledger: bench.receiver's loopback receiver, recording every request.

One implementation serves the benchmark and the tests; the tests' receiver keeps
each request (`requests`, `effects`: the effect applied once per X-Execution-Id)
and closes each connection after its reply.
"""

from __future__ import annotations

from bench.receiver import Receiver, Respond, ok

__all__ = ["Ledger", "Respond", "ok"]


class Ledger(Receiver):
    def __init__(self, respond: Respond | None = None) -> None:
        super().__init__(respond, record=True, keep_alive=False)

    def __enter__(self) -> Ledger:
        return self
