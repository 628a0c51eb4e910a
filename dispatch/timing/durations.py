"""A duration as the platform's messages write it: whole hours and minutes, minutes
and seconds, or seconds. One breakdown, two spellings (the beat's reasons are
compact, "14m00s"; the explainer's sentences spaced, "14 min 00 s")."""

from __future__ import annotations

from datetime import timedelta


def spell(delta: timedelta, *, units: tuple[str, str, str] = ("h", "m", "s"), sep: str = "") -> str:
    """`delta` in its two largest units (`units`: hours, minutes, seconds), `sep` between
    each number and its unit."""
    seconds = int(delta.total_seconds())
    hour, minute, second = units
    if seconds >= 3600:
        return f"{seconds // 3600}{sep}{hour}{sep}{(seconds % 3600) // 60:02d}{sep}{minute}"
    if seconds >= 60:
        return f"{seconds // 60}{sep}{minute}{sep}{seconds % 60:02d}{sep}{second}"
    return f"{seconds}{sep}{second}"
