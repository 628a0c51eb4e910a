"""SSRF guard for tenant-supplied HTTP destinations (failure contract C8:
docs/explanation/failure-contract.md; the rules: docs/explanation/security.md,
"The SSRF guard").

On an internal platform, internal services are the normal target, so the
rule is not "deny private": it is
  1. always deny loopback, link-local, cloud metadata, the platform's own
     infrastructure and special-purpose ranges — an explicit CIDR list, since
     Python's `ipaddress` flags misclassify some ranges (CVE-2024-4032);
  2. private ranges and internal names only where the tenant's operator
     allow-list says so;
  3. everything else (public addresses) is allowed.
IPv4 embedded in IPv6 (mapped, SIIT-translated, NAT64, 6to4, Teredo) is
unwrapped and judged as the IPv4 address it reaches. At save time a host is read
as a resolver reads it (NFKC, Unicode full stops as dots), so an IP address in
look-alike spelling (full-width digits, ideographic dots, a trailing dot) is
refused then, not only when the call is made.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings

from core import pg_urls

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Never reachable, whatever an allow-list says (except the explicit test
# allow-list of settings.TARGET_TEST_ALLOW, which exists for loopback test receivers).
ALWAYS_DENIED: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "'this network'"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local / cloud metadata"),
    ("100.100.100.200/32", "cloud metadata"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "broadcast"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
    ("100::/64", "discard-only"),
    ("2001:db8::/32", "documentation"),
    ("2001:2::/48", "benchmarking"),
    ("2001:10::/28", "ORCHID"),
    ("2001:20::/28", "ORCHIDv2"),
    ("fd00:ec2::254/128", "cloud metadata"),
)

# Reachable only through the tenant's allow-list.
PRIVATE: tuple[tuple[str, str], ...] = (
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("fc00::/7", "unique local"),
)

_DENIED_NETS = [(ipaddress.ip_network(n), why) for n, why in ALWAYS_DENIED]
_PRIVATE_NETS = [(ipaddress.ip_network(n), why) for n, why in PRIVATE]
# IPv4-translated (SIIT, RFC 2765/6145): ::ffff:0:a.b.c.d reaches a.b.c.d.
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_TEREDO = ipaddress.ip_network("2001::/32")


class Denied(Exception):
    """The destination may not be called; `reason` says why in one sentence."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def unwrap(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address really reaches, if it embeds one."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _SIIT:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip in _NAT64 or ip in _NAT64_LOCAL:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in _TEREDO and ip.teredo is not None:
            return ip.teredo[1]
        # IPv4-compatible (deprecated ::a.b.c.d)
        if int(ip) >> 32 == 0 and int(ip) > 1:
            return ipaddress.IPv4Address(int(ip))
    return ip


@dataclass(frozen=True)
class AllowList:
    networks: tuple[IPNetwork, ...] = ()
    host_patterns: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        nets: list[IPNetwork] = []
        hosts: list[str] = []
        for entry in entries:
            entry = entry.strip()
            if not entry:
                continue
            try:
                nets.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.append(entry.lower().rstrip("."))
        return cls(tuple(nets), tuple(hosts))

    def allows_ip(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.networks)

    def allows_host(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(fnmatch.fnmatchcase(host, pattern) for pattern in self.host_patterns)


def _denied_reason(ip: IPAddress) -> str | None:
    for net, why in _DENIED_NETS:
        if ip.version == net.version and ip in net:
            return why
    return None


def _private_reason(ip: IPAddress) -> str | None:
    for net, why in _PRIVATE_NETS:
        if ip.version == net.version and ip in net:
            return why
    return None


@lru_cache(maxsize=1)
def infrastructure() -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    """The platform's own hosts and addresses: its database, broker, cache, Vault, web.

    Resolved once per process; a tenant target pointing at any of them is denied.
    """
    hosts: set[str] = set()
    nets: list[IPNetwork] = []
    # Every host of a multi-host DATABASE_URL: a standby is the platform's database
    # too, and is the primary after a fail-over.
    named = [host for host, _ in pg_urls.hosts(settings.DATABASE_URL)]
    urls = [
        settings.CELERY_BROKER_URL,
        getattr(settings, "REDIS_URL", ""),
        getattr(settings, "VAULT_ADDR", ""),
    ]
    named += [(urlsplit(url).hostname or "") if url else "" for url in urls]
    for host in named:
        if host and not host.startswith("/"):
            hosts.add(host.lower())
    hosts.update(
        h.lower() for h in settings.ALLOWED_HOSTS if h not in {"*", "testserver"} and "[" not in h
    )
    for extra in settings.TARGET_DENY_EXTRA:
        try:
            nets.append(ipaddress.ip_network(extra, strict=False))
        except ValueError:
            hosts.add(extra.lower())
    for host in list(hosts):
        try:
            nets.append(ipaddress.ip_network(host))
            continue
        except ValueError:
            pass
        try:
            for info in socket.getaddrinfo(host, None):
                nets.append(ipaddress.ip_network(info[4][0]))
        except OSError:
            continue
    return frozenset(hosts), tuple(nets)


def _test_allowed(ip: IPAddress, port: int | None) -> bool:
    # Tests reach their loopback receivers only through this explicit list of
    # "ip:port" entries; production leaves it empty.
    allowed: list[str] = getattr(settings, "TARGET_TEST_ALLOW", [])
    return f"{ip}:{port}" in allowed or (ip.version == 6 and f"[{ip}]:{port}" in allowed)


def check_ip(ip: IPAddress, *, allow: AllowList, port: int | None = None) -> None:
    """Raise Denied unless `ip` may be called by a tenant with this allow-list."""
    real = unwrap(ip)
    shown = f"{ip}" if real == ip else f"{ip} (reaches {real})"
    if _test_allowed(real, port):
        return
    why = _denied_reason(real) or (_denied_reason(ip) if real != ip else None)
    if why:
        raise Denied(f"{shown} is a {why} address, which targets may never reach")
    _, infra_nets = infrastructure()
    if any(real.version == n.version and real in n for n in infra_nets):
        raise Denied(f"{shown} belongs to the platform's own infrastructure")
    private = _private_reason(real) or (_private_reason(ip) if real != ip else None)
    if private and not (allow.allows_ip(real) or allow.allows_ip(ip)):
        raise Denied(f"{shown} is a {private} address not in this tenant's egress allow-list")


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address if `host` is an IP literal in any spelling a resolver accepts, else None.

    `inet_aton` accepts "127.1", "0x7f.1" and "2130706433", which are all loopback
    to a resolver; a guard that only knew dotted quads would let them through.
    """
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if (
        host
        and all(c in "0123456789abcdefxABCDEFX." for c in host)
        and any(c.isdigit() for c in host)
    ):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


_UNICODE_DOTS = "\u3002\uff0e\uff61"  # the full stops IDNA treats as "."


def canonical_host(host: str) -> str:
    """`host` as a resolver reads it: NFKC (full-width → ASCII), Unicode full stops as dots."""
    host = unicodedata.normalize("NFKC", host.strip("[]"))
    for dot in _UNICODE_DOTS:
        host = host.replace(dot, ".")
    return host.lower()


def check_host_at_save(host: str, *, allow: AllowList, port: int | None = None) -> None:
    """Save-time check: IP literals are judged now; names are judged when called.

    A name that does not resolve yet is accepted (docs/explanation/security.md,
    "The SSRF guard"): it is checked
    on its resolved address at connect time.
    """
    if "%" in host and ":" not in host:
        # A host name has no percent-encoding (RFC 3986 allows it only for an IPv6
        # zone, written [fe80::1%25eth0]): `127%2e0%2e0%2e1` is a disguise, refused
        # as one whatever a resolver would make of it.
        raise Denied(f"{host} is percent-encoded; write the host name as it is")
    canonical = canonical_host(host)
    name = canonical.rstrip(".")
    ip = parse_ip_literal(name) if name else None
    if ip is not None:
        if name != host.strip("[]").lower():
            # A resolver maps these to the address; refuse the disguise itself,
            # whatever the address, so no list can be fooled by the spelling.
            raise Denied(
                f"{host} is the IP address {ip} in a look-alike spelling (full-width "
                f"digits, Unicode dots or a trailing dot); write it as {ip}"
            )
        check_ip(ip, allow=allow, port=port)
        return
    if name == "localhost" or name.endswith(".localhost"):
        raise Denied(f"{host} is a loopback name")
    infra_hosts, _ = infrastructure()
    if name in infra_hosts:
        raise Denied(f"{host} is the platform's own infrastructure")
    if name == "metadata.google.internal" or name == "metadata":
        raise Denied(f"{host} is a cloud metadata service")
