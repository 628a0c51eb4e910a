"""Reading configuration from the environment (12-factor).

Every secret-bearing variable may instead be given as NAME_FILE, the path of a
file holding the value (Docker/Kubernetes secrets); the file wins.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured


def get(name: str, default: str | None = None) -> str | None:
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def get_bool(name: str, default: bool) -> bool:
    value = get(name)
    if value is None:
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false)")


def get_int(name: str, default: int) -> int:
    value = get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from exc


def get_list(name: str, default: list[str]) -> list[str]:
    value = get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]
