"""The SSRF guard's address rules (no network: IP literals only)."""

import ipaddress

import pytest

from dispatch.targets import netguard

NO_ALLOW = netguard.AllowList()


@pytest.mark.parametrize(
    "literal",
    [
        "127.0.0.1",
        "127.1",
        "0x7f.1",
        "2130706433",
        "0177.0.0.1",
        "0.0.0.0",
        "169.254.169.254",
        "100.100.100.200",
        "::1",
        "::",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe",
        "2002:7f00:1::",
        "fd00:ec2::254",
        "224.0.0.1",
        "255.255.255.255",
        "198.18.0.1",
        "192.0.2.1",
        "2001:db8::1",
        "::127.0.0.1",
        "240.0.0.1",
        "::ffff:0:127.0.0.1",  # SIIT (IPv4-translated)
        "::ffff:0:7f00:1",
        "::ffff:0:a9fe:a9fe",
        "2001:2::1",  # IPv6 benchmarking
        "2001:2:0:ffff::1",
    ],
)
def test_always_denied_addresses_are_refused_even_with_a_wide_allow_list(literal: str) -> None:
    allow_all = netguard.AllowList.parse(["0.0.0.0/0", "::/0", "*"])
    with pytest.raises(netguard.Denied):
        netguard.check_host_at_save(literal, allow=allow_all)


@pytest.mark.parametrize(
    "literal",
    [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "fd12::1",
        "::ffff:10.0.0.1",
        "::ffff:0:10.0.0.1",
        "64:ff9b::a00:1",
    ],
)
def test_private_addresses_need_the_tenant_allow_list(literal: str) -> None:
    with pytest.raises(netguard.Denied) as denied:
        netguard.check_host_at_save(literal, allow=NO_ALLOW)
    assert "allow-list" in denied.value.reason
    allow = netguard.AllowList.parse(
        ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"]
    )
    netguard.check_host_at_save(literal, allow=allow)


@pytest.mark.parametrize("literal", ["8.8.8.8", "2606:4700::1111", "93.184.216.34"])
def test_public_addresses_are_allowed(literal: str) -> None:
    netguard.check_host_at_save(literal, allow=NO_ALLOW)


def test_names_are_judged_at_call_time_except_loopback_and_metadata_names() -> None:
    netguard.check_host_at_save("billing.internal", allow=NO_ALLOW)
    netguard.check_host_at_save("does-not-resolve.example", allow=NO_ALLOW)
    for name in ["localhost", "api.localhost", "metadata.google.internal"]:
        with pytest.raises(netguard.Denied):
            netguard.check_host_at_save(name, allow=NO_ALLOW)


def test_unwrap_reaches_the_embedded_ipv4_address() -> None:
    cases = {
        "::ffff:1.2.3.4": "1.2.3.4",
        "64:ff9b::102:304": "1.2.3.4",
        "2002:102:304::1": "1.2.3.4",
        "::ffff:0:1.2.3.4": "1.2.3.4",
        "1.2.3.4": "1.2.3.4",
    }
    for wrapped, plain in cases.items():
        assert netguard.unwrap(ipaddress.ip_address(wrapped)) == ipaddress.ip_address(plain)


def test_host_patterns_in_allow_list_match_names() -> None:
    allow = netguard.AllowList.parse(["*.billing.internal", "10.20.0.0/16"])
    assert allow.allows_host("api.billing.internal")
    assert not allow.allows_host("billing.internal.evil.com")
    assert allow.allows_ip(ipaddress.ip_address("10.20.3.4"))
    assert not allow.allows_ip(ipaddress.ip_address("10.21.3.4"))


@pytest.mark.parametrize(
    "host",
    [
        "\uff11\uff12\uff17.\uff10.\uff10.\uff11",  # full-width digits: 127.0.0.1
        "127\u30020\u30020\u30021",  # ideographic full stops
        "127\uff0e0\uff0e0\uff0e1",  # full-width full stops
        "127\uff610\uff610\uff611",  # half-width ideographic full stops
        "127.0.0.1.",  # trailing dot
        "0x7f.1.",
        "8.8.8.8.",  # a public address in disguise is refused too
        "\uff18.\uff18.\uff18.\uff18",
    ],
)
def test_ip_look_alikes_are_refused_at_save(host: str) -> None:
    allow_all = netguard.AllowList.parse(["0.0.0.0/0", "::/0", "*"])
    with pytest.raises(netguard.Denied) as denied:
        netguard.check_host_at_save(host, allow=allow_all)
    assert "look-alike" in denied.value.reason


@pytest.mark.parametrize("host", ["127%2e0%2e0%2e1", "%6cocalhost", "billing%2einternal"])
def test_percent_encoded_hosts_are_refused_at_save(host: str) -> None:
    allow_all = netguard.AllowList.parse(["0.0.0.0/0", "::/0", "*"])
    with pytest.raises(netguard.Denied) as denied:
        netguard.check_host_at_save(host, allow=allow_all)
    assert denied.value.reason == f"{host} is percent-encoded; write the host name as it is"


def test_look_alike_names_of_loopback_are_refused_at_save() -> None:
    for name in ["\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54", "localhost."]:
        with pytest.raises(netguard.Denied):
            netguard.check_host_at_save(name, allow=NO_ALLOW)


def test_benchmarking_range_neighbours_stay_public() -> None:
    # 2001:2::/48 only: the next /48s are judged as before.
    netguard.check_host_at_save("2001:3::1", allow=NO_ALLOW)
    netguard.check_host_at_save("2001:2:1::1", allow=NO_ALLOW)


def test_every_host_of_a_multi_host_database_url_is_platform_infrastructure() -> None:
    from django.test import override_settings

    cluster = "postgresql://u@10.9.0.11:5432,10.9.0.12:5433,pg3.internal/scheduler"
    netguard.infrastructure.cache_clear()
    try:
        with override_settings(DATABASE_URL=cluster, TARGET_DENY_EXTRA=[]):
            hosts, nets = netguard.infrastructure()
    finally:
        netguard.infrastructure.cache_clear()
    assert {"10.9.0.11", "10.9.0.12", "pg3.internal"} <= hosts
    for standby in ("10.9.0.11", "10.9.0.12"):
        assert any(ipaddress.ip_address(standby) in net for net in nets), standby
