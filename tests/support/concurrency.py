"""Requests that race: one thread per client, all released together."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connection
from rest_framework.test import APIClient

T = TypeVar("T")


def at_once(clients: list[APIClient], request: Callable[[APIClient], T]) -> list[T]:
    """`request(client)` for every client, each on its own thread (and database
    connection, closed after), released together by a barrier; results in the order
    they finished."""
    barrier = threading.Barrier(len(clients))
    results: list[T] = []

    def go(client: APIClient) -> None:
        barrier.wait()
        try:
            results.append(request(client))
        finally:
            connection.close()

    threads = [threading.Thread(target=go, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
