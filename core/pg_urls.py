"""PostgreSQL URLs with one host or several, as Django's settings and libpq need them.

A replicated PostgreSQL (Patroni, a managed service's standbys) is named by libpq's
multi-host form, `postgresql://user@h1:5432,h2:5433/db?target_session_attrs=read-write`:
libpq tries the hosts in turn and keeps the first that accepts writes, so after a
fail-over every new connection finds the new primary with no DNS change or proxy
(docs/how-to/ha-postgresql.md). dj-database-url reads one host only (urllib cannot
read `h1:5432,h2` as a port), so a host list is taken apart here and handed to
Django as libpq wants it: HOST `h1,h2`, PORT `5432,5433`, and the URL's query in
OPTIONS (Django's backend passes both lists and every option to libpq unchanged).

These defaults apply to a multi-host URL only, each overridden by the URL's own query:

* `target_session_attrs=read-write` — every process of the platform writes, and
  libpq's own default (`any`) would settle on the first standby that answers;
* `connect_timeout=5` — per host: a dead machine that answers nothing (no RST)
  would otherwise hold each new connection for the kernel's whole SYN retry
  (about two minutes) before the next host is tried;
* `keepalives_idle=10`, `keepalives_interval=5`, `keepalives_count=3` and
  `tcp_user_timeout=15000` (ms) — an established connection to a primary that
  vanished without a reset (power or network lost: nothing closes its sockets) fails
  within about 25 s instead of waiting out TCP's retransmissions (15 minutes or more),
  so the process reconnects to the new primary. A slow query is not cut short: the
  server's kernel answers keepalives and acknowledges what it was sent, whatever
  PostgreSQL is doing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote, urlencode

import dj_database_url

SCHEMES = ("postgres://", "postgresql://")
MULTI_HOST_DEFAULTS: dict[str, Any] = {
    "target_session_attrs": "read-write",
    "connect_timeout": 5,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 15000,
}
# The OPTIONS a URL of `url_of` carries back: libpq connection parameters only
# (settings.py adds `options` for the session limits; each process sets those itself).
_URL_OPTIONS = (
    *MULTI_HOST_DEFAULTS,
    "keepalives",
    "sslmode",
    "application_name",
)


class BadDatabaseUrl(ValueError):
    """DATABASE_URL is not a PostgreSQL URL this module can read."""


def _split(url: str) -> tuple[str, str, str, str]:
    """(scheme://, userinfo, host list, path and query) of `url`."""
    if not url.startswith(SCHEMES):
        raise BadDatabaseUrl("not a postgresql:// URL")
    scheme, rest = url.split("://", 1)
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    # A password holding "@" must be percent-encoded; the last "@" ends the user part.
    userinfo, at, hostlist = netloc.rpartition("@")
    return f"{scheme}://", userinfo + at, hostlist, tail


def _host_port(item: str) -> tuple[str, str]:
    """One entry of a host list: (host, port or ""), an IPv6 address in brackets."""
    if item.startswith("["):
        host, bracket, rest = item[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise BadDatabaseUrl(f"bad IPv6 host {item!r}")
        port = rest[1:]
    else:
        host, _, port = item.partition(":")
    if port and not port.isdigit():
        raise BadDatabaseUrl(f"port {port!r} of host {host!r} is not a number")
    if not host:
        raise BadDatabaseUrl("empty host in the host list")
    return unquote(host), port


def hosts(url: str) -> list[tuple[str, str]]:
    """Every (host, port) a DATABASE_URL names, in order ("" for a default port)."""
    _, _, hostlist, _ = _split(url)
    if not hostlist:
        return []
    return [_host_port(item) for item in hostlist.split(",")]


def is_multi_host(url: str) -> bool:
    return len(hosts(url)) > 1


def parse(url: str, **settings: Any) -> dict[str, Any]:
    """Django's DATABASES entry for `url`, one host or several (`settings` as
    dj_database_url.parse takes them: conn_max_age, conn_health_checks...)."""
    if not is_multi_host(url):
        try:
            return dict(dj_database_url.parse(url, **settings))
        except ValueError as exc:
            raise BadDatabaseUrl(str(exc) or "unreadable URL") from None
    scheme, userinfo, _, tail = _split(url)
    listed = hosts(url)
    # dj_database_url reads everything but the host list: user, password, database,
    # the query's options. A stand-in host takes the list's place, then the list goes back.
    try:
        config: dict[str, Any] = dict(
            dj_database_url.parse(f"{scheme}{userinfo}localhost{tail}", **settings)
        )
    except ValueError as exc:
        raise BadDatabaseUrl(str(exc) or "unreadable URL") from None
    config["HOST"] = ",".join(host for host, _ in listed)
    ports = [port for _, port in listed]
    config["PORT"] = ",".join(ports) if any(ports) else ""
    given: dict[str, Any] = config.get("OPTIONS") or {}
    config["OPTIONS"] = MULTI_HOST_DEFAULTS | given
    return config


def url_of(settings_dict: Mapping[str, Any]) -> str:
    """The URL of a DATABASES entry (one host or several), for child processes:
    the inverse of `parse` for the connection parameters a URL can carry."""
    host_list = str(settings_dict.get("HOST") or "").split(",")
    port_list = str(settings_dict.get("PORT") or "").split(",")
    if len(port_list) == 1:
        port_list = port_list * len(host_list)
    netloc = []
    for host, port in zip(host_list, port_list, strict=False):
        spelled = f"[{host}]" if ":" in host else quote(host, safe="")
        netloc.append(spelled + (f":{port}" if port else ""))
    auth = quote(str(settings_dict.get("USER") or ""), safe="")
    if settings_dict.get("PASSWORD"):
        auth += ":" + quote(str(settings_dict["PASSWORD"]), safe="")
    options = settings_dict.get("OPTIONS") or {}
    query = urlencode({k: options[k] for k in _URL_OPTIONS if k in options})
    name = quote(str(settings_dict.get("NAME") or ""), safe="")
    return f"postgresql://{auth}@{','.join(netloc)}/{name}" + (f"?{query}" if query else "")
