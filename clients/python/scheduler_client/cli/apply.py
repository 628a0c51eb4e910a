"""`schedctl apply -f FILE|DIR [--prune] [--dry-run [--exit-code]]` and `schedctl export`."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Filled in once the server's apply/export endpoints exist (wip/apply)."""
