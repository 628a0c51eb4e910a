"""The two spellings of a socket Redis URL (kombu's and redis-py's) convert both ways."""

from __future__ import annotations

import pytest

from core.redis_urls import is_redis, kombu_url, redis_py_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis+socket:///tmp/r.sock", "unix:///tmp/r.sock?db=0"),
        ("redis+socket:///tmp/r.sock?virtual_host=3", "unix:///tmp/r.sock?db=3"),
        ("unix:///tmp/r.sock?db=2", "unix:///tmp/r.sock?db=2"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_redis_py_spelling(url: str, expected: str) -> None:
    assert redis_py_url(url) == expected


def test_a_database_can_be_chosen_on_every_scheme() -> None:
    assert (
        redis_py_url("redis+socket:///tmp/r.sock?virtual_host=0", db=1) == "unix:///tmp/r.sock?db=1"
    )
    assert redis_py_url("redis://:pw@10.0.0.1:6380/0", db=1) == "redis://:pw@10.0.0.1:6380/1"
    assert redis_py_url("rediss://h:6379", db=1) == "rediss://h:6379/1"


def test_kombu_spelling_round_trips() -> None:
    assert kombu_url("unix:///tmp/r.sock?db=1") == "redis+socket:///tmp/r.sock?virtual_host=1"
    assert redis_py_url(kombu_url("unix:///tmp/r.sock?db=4")) == "unix:///tmp/r.sock?db=4"
    assert kombu_url("redis://h:6379/0") == "redis://h:6379/0"


def test_only_redis_schemes_are_redis() -> None:
    assert is_redis("redis+socket:///x") and is_redis("unix:///x") and is_redis("rediss://h")
    assert not is_redis("amqp://guest:guest@127.0.0.1:5672//")
