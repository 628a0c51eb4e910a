"""A beat whose RabbitMQ connection goes silent (black-holed, not refused) does not
freeze: every broker call of the publishing path is bounded, and the partitions
stay leased (issue 16, defect 1). A real TCP proxy between the beat and RabbitMQ
stops forwarding mid-connection, as a network partition does."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings

from dispatch.models import SchedulerPartition
from dispatch.scheduler.firing import Pending
from tenants.models import Tenant
from tests.support.beat_support import running_beat
from tests.support.worker_support import db_now, purge

pytestmark = pytest.mark.django_db(transaction=True)
RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "")


class BlackHoleProxy:
    """Forwards TCP both ways until `black_hole()`: then it keeps every socket open
    and reads nothing more, so nothing arrives and no error is ever returned."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.holed = threading.Event()
        self.stopped = threading.Event()
        self.sockets: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    def black_hole(self) -> None:
        self.holed.set()

    def close(self) -> None:
        self.stopped.set()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while not self.stopped.is_set():
            if self.holed.is_set():
                time.sleep(0.05)
                continue
            try:
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready or self.holed.is_set():
                    continue
                data = src.recv(65536)
                if not data:
                    return
                dst.sendall(data)
            except OSError:
                return


@pytest.fixture
def proxied_broker(settings: Any) -> Iterator[BlackHoleProxy]:
    if not RABBITMQ_URL:
        pytest.skip("RABBITMQ_URL not set")
    parts = urlsplit(RABBITMQ_URL)
    proxy = BlackHoleProxy(parts.hostname or "127.0.0.1", parts.port or 5672)
    auth = parts.netloc.rpartition("@")[0]
    settings.CELERY_BROKER_URL = urlunsplit(
        parts._replace(
            netloc=f"{auth}@127.0.0.1:{proxy.port}" if auth else f"127.0.0.1:{proxy.port}"
        )
    )
    purge(RABBITMQ_URL)
    try:
        yield proxy
    finally:
        proxy.close()
        purge(RABBITMQ_URL)


def test_a_black_holed_broker_neither_freezes_the_beat_nor_costs_its_leases(
    proxied_broker: BlackHoleProxy, tenant: Tenant
) -> None:
    with running_beat("blackhole-beat", lease_ttl_s=6) as beat:
        beat.maintain_leases()
        assert len(beat.owned) == settings.SCHEDULER_PARTITIONS

        def items(n: int) -> list[Pending]:
            return [
                Pending(0, str(uuid.uuid4()), 1, "default.short", tenant.pk, 0) for _ in range(n)
            ]

        assert len(beat.publish_items(items(5))) == 5  # confirmed, through the proxy
        proxied_broker.black_hole()
        result: list[list[Pending]] = []
        started = time.monotonic()
        publishing = threading.Thread(target=lambda: result.append(beat.publish_items(items(5))))
        publishing.start()
        publishing.join(timeout=20)
        took = time.monotonic() - started
        assert not publishing.is_alive(), "the beat froze on a silent broker"
        assert result == [[]]  # nothing counts as sent: the rows are retried
        assert took < 6  # a handful of calls, each bounded by the 1 s I/O bound: within the lease
        beat.cycle()  # the cycle goes on: leases renewed at the epochs granted
        held = SchedulerPartition.objects.filter(
            owner="blackhole-beat", lease_expires_at__gt=db_now()
        ).count()
        assert held == settings.SCHEDULER_PARTITIONS
        assert beat.counters.stale_writes_rejected == 0
