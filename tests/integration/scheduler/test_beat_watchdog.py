"""A beat cut off from PostgreSQL for good (a black-holed link: the peer keeps the
TCP connection open and answers nothing, so no socket timeout fires) must not hang
forever: the watchdog exits with 70 once its loop has not come round for
BEAT_STALL_EXIT_S, and a SIGTERM it cannot honour from the stuck main thread still
ends it after the lease (exit 143). Real beat processes behind a real TCP proxy."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
from django.db import connection

from dispatch.models import SchedulerPartition
from tests.support.faultproxy import FaultProxy
from tests.support.procs import Proc, beat_cmd, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def owns_partitions(name: str) -> bool:
    return SchedulerPartition.objects.filter(owner=name).exists()


def start_cut_off_beat(
    start: Callable[..., Proc], proxy: FaultProxy, name: str, stall_s: str
) -> Proc:
    beat = start(
        name,
        beat_cmd("--name", name, "--lease-ttl", "3", "--cycle", "0.2"),
        DATABASE_URL=proxy.database_url(connection.settings_dict),
        BEAT_STALL_EXIT_S=stall_s,
    )
    wait_for(lambda: owns_partitions(name), timeout=60, what=f"{name} leasing partitions")
    proxy.blackhole()
    return beat


def test_a_beat_stuck_on_a_black_holed_database_exits_for_its_supervisor(
    start: Callable[..., Proc], db_proxy: FaultProxy
) -> None:
    beat = start_cut_off_beat(start, db_proxy, "wd-stall", stall_s="4")
    wait_for(lambda: not beat.alive(), timeout=40, what="the stuck beat exiting")
    assert beat.proc.returncode == 70, beat.output()[-3000:]
    assert "no cycle for" in beat.output()


def test_sigterm_ends_a_beat_stuck_on_a_black_holed_database(
    start: Callable[..., Proc], db_proxy: FaultProxy
) -> None:
    beat = start_cut_off_beat(start, db_proxy, "wd-term", stall_s="0")  # the watchdog off
    time.sleep(2)  # the main thread is now stuck inside a database call
    assert beat.alive(), beat.output()[-3000:]
    beat.signal(signal.SIGTERM)
    wait_for(lambda: not beat.alive(), timeout=20, what="the stuck beat honouring SIGTERM")
    assert beat.proc.returncode == 143, beat.output()[-3000:]
    assert "still running" in beat.output()
