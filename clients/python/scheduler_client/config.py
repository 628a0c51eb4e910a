"""Where the client finds its server and token: the environment, else the file
`schedctl login` writes ($XDG_CONFIG_HOME/schedctl/config.toml, mode 0600)."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

URL_ENV = "SCHEDCTL_URL"
TOKEN_ENV = "SCHEDCTL_TOKEN"  # noqa: S105  # the variable's name, not a secret
CONFIG_ENV = "SCHEDCTL_CONFIG"  # an explicit file, for CI and tests


@dataclass(frozen=True)
class Settings:
    url: str | None
    token: str | None

    def __repr__(self) -> str:  # the token never reaches a log or a traceback
        return f"Settings(url={self.url!r}, token={'***' if self.token else None})"


def config_path() -> Path:
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "schedctl" / "config.toml"


def read_file(path: Path | None = None) -> Settings:
    path = path or config_path()
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return Settings(None, None)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from None
    url, token = data.get("url"), data.get("token")
    return Settings(
        url if isinstance(url, str) else None, token if isinstance(token, str) else None
    )


def load(url: str | None = None, token: str | None = None) -> Settings:
    """Explicit values first, then the environment, then the config file."""
    url = url or os.environ.get(URL_ENV) or None
    token = token or os.environ.get(TOKEN_ENV) or None
    if url and token:
        return Settings(url, token)
    stored = read_file()
    return Settings(url or stored.url, token or stored.token)


def write_file(url: str, token: str, path: Path | None = None) -> Path:
    """Write the config file, readable by its owner only (it holds a secret)."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # A JSON string is a valid TOML basic string (the same escapes), so no TOML writer is needed.
    text = f"url = {json.dumps(url)}\ntoken = {json.dumps(token)}\n"
    tmp = path.with_name(path.name + ".tmp")
    # Created 0600 from the start: the token is never world-readable, not even for a moment.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o600)  # an existing tmp file keeps its mode through O_CREAT
    os.replace(tmp, path)
    return path
