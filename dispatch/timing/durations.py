"""A duration as the platform's messages write it: whole hours and minutes, minutes
and seconds, or seconds. One breakdown, two spellings (the beat's reasons are
compact, "14m00s"; the explainer's sentences spaced, "14 min 00 s"). A measured one
(a run's duration, a percentile, a lag: fractions of a second matter) in the one unit
that fits it: `measured`."""

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


def measured(seconds: float) -> str:
    """A measured duration as people read it: ms below a second ("8 ms", "0.4 ms"), s
    below a minute ("2.4 s"), min above ("1.5 min", "120 min") — never "0.0 s" for a run
    of 8 ms. A value that rounds up to the next unit is said in it ("1.0 s", not "1000 ms")."""
    if seconds < 0:
        return f"-{measured(-seconds)}"
    ms = seconds * 1000
    if round(ms) < 1000:
        return f"{ms:.1f} ms" if 0 < ms < 1 else f"{ms:.0f} ms"
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    minutes = seconds / 60
    return f"{minutes:.1f} min" if minutes < 100 else f"{minutes:.0f} min"


def relative(seconds: float) -> str:
    """How long ago (or until) an instant is, in its largest whole unit: "just now",
    "40 s ago", "5 min ago", "3 h ago", "2 d ago", "in 5 min"."""
    ahead, span = seconds < 0, abs(seconds)
    if span < 5:
        return "just now"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s")):
        if span >= size:
            text = f"{int(span // size)} {unit}"
            return f"in {text}" if ahead else f"{text} ago"
    return "just now"  # unreachable: span >= 5 matched "s"


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse(text: str) -> timedelta:
    """A duration as users write it: one or more `<whole number><unit>` parts, unit one of
    s m h d w ("90m", "1h30m", "7d"). ValueError (with a reason) otherwise; "0s" is zero."""
    value = text.strip().lower() if isinstance(text, str) else ""
    if not value:
        raise ValueError('must be a duration such as "90m", "12h" or "7d"')
    total, number = 0, ""
    for char in value:
        if char in "0123456789" and len(number) < 12:
            number += char
        elif char in _UNITS and number:
            total += int(number) * _UNITS[char]
            number = ""
        else:
            raise ValueError(
                f'must be a duration such as "90m", "12h" or "7d" (units s, m, h, d, w), not {text!r}'
            )
    if number:
        raise ValueError(f"a number needs a unit (s, m, h, d, w): {text!r}")
    return timedelta(seconds=total)
