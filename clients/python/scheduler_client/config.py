"""Where the client finds its server and token: the environment, else the file
`schedctl login` writes ($XDG_CONFIG_HOME/schedctl/config.toml, mode 0600)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

URL_ENV = "SCHEDCTL_URL"
TOKEN_ENV = "SCHEDCTL_TOKEN"  # noqa: S105  # the variable's name, not a secret
CONFIG_ENV = "SCHEDCTL_CONFIG"  # an explicit file, for CI and tests
RETRIES_ENV = "SCHEDCTL_RETRIES"
RETRY_TIMEOUT_ENV = "SCHEDCTL_RETRY_TIMEOUT"
# The client's retry limits unless told otherwise (scheduler_client/client.py says
# what is retried): enough for a planned switchover of the platform's PostgreSQL
# (seconds) and most fail-overs, short enough that a CI job does not hang.
DEFAULT_RETRIES = 6
DEFAULT_RETRY_TIMEOUT_S = 30.0


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


def retry_options(retries: int | None = None, timeout: float | None = None) -> dict[str, Any]:
    """The Client's `max_retries` / `retry_timeout` given here or in the environment
    (SCHEDCTL_RETRIES, SCHEDCTL_RETRY_TIMEOUT); those set nowhere are left out, so
    the Client's defaults apply. ValueError names a variable that is not a number."""
    options: dict[str, Any] = {}
    raw_retries = os.environ.get(RETRIES_ENV, "").strip()
    raw_timeout = os.environ.get(RETRY_TIMEOUT_ENV, "").strip()
    if retries is None and raw_retries:
        try:
            retries = int(raw_retries)
        except ValueError:
            raise ValueError(f"{RETRIES_ENV}: not a whole number: {raw_retries!r}") from None
    if timeout is None and raw_timeout:
        try:
            timeout = float(raw_timeout)
        except ValueError:
            raise ValueError(f"{RETRY_TIMEOUT_ENV}: not a number: {raw_timeout!r}") from None
    if retries is not None:
        if retries < 0:
            raise ValueError(f"retries must be 0 or more, not {retries}")
        options["max_retries"] = retries
    if timeout is not None:
        if not timeout >= 0:  # NaN too
            raise ValueError(f"the retry timeout must be 0 or more seconds, not {timeout}")
        options["retry_timeout"] = timeout
    return options


class ConfigError(Exception):
    """The config file cannot be written safely; the message says why and what to do."""


# Write bits for the group and for others: whoever holds one can plant a link where
# the file is about to be written, or replace the file after it is written.
_SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _private_dir(directory: Path, warn: Callable[[str], None]) -> None:
    """Make sure no one else can add, replace or remove files in `directory`.

    A directory of the user's own that others may write to is tightened (only
    the group and world write bits dropped: they are the danger, the file itself
    is 0600) and the user is told, as ssh and gpg users expect. One owned by
    someone else is refused: its owner could undo any fix, and it is not ours to
    chmod.
    """
    if os.name == "nt":  # access there is by ACLs, which these mode bits do not show
        return
    info = directory.stat()
    mode = stat.S_IMODE(info.st_mode)
    if not mode & _SHARED_WRITE:
        return
    if info.st_uid != os.geteuid():
        raise ConfigError(
            f"{directory} is writable by other users (mode {mode:04o}) and is not yours: "
            "someone else could replace the token file or read the token through a link "
            "they plant. Use a directory only you can write: `mkdir -m 700 DIR` and set "
            f"{CONFIG_ENV}=DIR/config.toml (or unset it for the default)"
        )
    tightened = mode & ~_SHARED_WRITE
    os.chmod(directory, tightened)
    warn(
        f"{directory} was writable by other users (mode {mode:04o}); "
        f"set to {tightened:04o} so that no one else can replace the token file"
    )


def write_file(
    url: str, token: str, path: Path | None = None, *, warn: Callable[[str], None] | None = None
) -> Path:
    """Write the config file, readable by its owner only (it holds a secret).

    Written to a fresh file (O_EXCL, a random name) in the same directory, then
    renamed over the old one: a file or a link someone planted under a predictable
    name is never written through, and a reader never sees half a file.
    `ConfigError` when the directory is not safe to hold it (_private_dir).
    """
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _private_dir(path.parent, warn or (lambda _text: None))
    # A JSON string is a valid TOML basic string (the same escapes), so no TOML writer is needed.
    text = f"url = {json.dumps(url)}\ntoken = {json.dumps(token)}\n"
    # mkstemp creates it 0600 with O_CREAT | O_EXCL | O_NOFOLLOW: the token is never
    # readable by others, not even for a moment.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)  # exactly 0600, whatever the umask
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path
