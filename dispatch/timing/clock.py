"""How an instant reads to a person: the one rule for every time the console shows
(its `ts` tag) and for the sentences the platform words for it (a resume plan), so a
page never mixes zones or formats. Stdlib only: shipped in the client as well."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo


def instant_text(value: datetime, zone: ZoneInfo, *, seconds: bool = True) -> str:
    """`2026-03-29 03:30:00 CEST`: the wall time in `zone`, labelled with its abbreviation
    (milliseconds when there are any)."""
    local = value.astimezone(zone)
    text = local.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    if seconds and local.microsecond:
        text += f".{local.microsecond // 1000:03d}"
    return f"{text} {local.tzname()}"
