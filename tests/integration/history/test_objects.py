"""The archive's object stores (dispatch/history/objects.py) on real storage: a
folder under tmp_path, and moto's S3 server running as a subprocess."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from dispatch.history.objects import (
    FileStore,
    ObjectMissing,
    ObjectStore,
    ObjectStoreError,
    S3Store,
    store_from_settings,
    store_from_url,
    validate_key,
)
from tests.support.net import free_port
from tests.support.s3 import ACCESS_KEY, CREDENTIALS, SECRET_KEY


def new_bucket() -> str:
    return f"history-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def s3_store(moto_endpoint: str) -> S3Store:
    store = S3Store(new_bucket(), "archive/v1", endpoint_url=moto_endpoint, **CREDENTIALS)
    store.ensure_bucket()
    return store


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.slow)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "file":
        yield FileStore(tmp_path / "archive")
    else:
        yield request.getfixturevalue("s3_store")


DAY = "2025-03-09"


def test_round_trip(store: ObjectStore) -> None:
    assert isinstance(store, ObjectStore)
    store.put(f"{DAY}/executions.jsonl", b'{"id": 1}\n')
    store.put(f"{DAY}/events.jsonl", b"")
    store.put("2025-03-10/executions.jsonl", bytes(range(256)))

    assert store.get(f"{DAY}/executions.jsonl") == b'{"id": 1}\n'
    assert store.get(f"{DAY}/events.jsonl") == b""
    assert store.get("2025-03-10/executions.jsonl") == bytes(range(256))
    assert store.exists(f"{DAY}/events.jsonl")
    assert not store.exists(f"{DAY}/missing.jsonl")

    every = [f"{DAY}/events.jsonl", f"{DAY}/executions.jsonl", "2025-03-10/executions.jsonl"]
    assert store.keys("") == every
    assert store.keys(f"{DAY}/") == every[:2]
    # A plain string prefix, as on S3: it may end inside a segment.
    assert store.keys("2025-03-1") == every[2:]
    assert store.keys(f"{DAY}/ev") == every[:1]
    assert store.keys("2024") == []

    store.put(f"{DAY}/executions.jsonl", b"replaced")
    assert store.get(f"{DAY}/executions.jsonl") == b"replaced"

    store.delete(f"{DAY}/executions.jsonl")
    assert not store.exists(f"{DAY}/executions.jsonl")
    assert store.keys(f"{DAY}/") == [f"{DAY}/events.jsonl"]
    store.delete(f"{DAY}/executions.jsonl")  # absent: not an error, as on S3


def test_url_names_the_location(store: ObjectStore, tmp_path: Path) -> None:
    url = store.url(f"{DAY}/events.jsonl")
    if isinstance(store, FileStore):
        assert url == f"file://{tmp_path.resolve()}/archive/{DAY}/events.jsonl"
    else:
        assert isinstance(store, S3Store)
        assert url == f"s3://{store.bucket}/archive/v1/{DAY}/events.jsonl"


def test_an_absent_key_is_object_missing(store: ObjectStore) -> None:
    with pytest.raises(ObjectMissing) as info:
        store.get(f"{DAY}/nothing-here.jsonl")
    assert info.value.url == store.url(f"{DAY}/nothing-here.jsonl")
    assert str(info.value) == f"{store.url(f'{DAY}/nothing-here.jsonl')}: no such object"
    assert isinstance(info.value, ObjectStoreError)
    assert not store.exists(f"{DAY}/nothing-here.jsonl")


BAD_KEYS = [
    ("../escape", "'..' segment"),
    (f"{DAY}/../../etc/passwd", "'..' segment"),
    ("./here", "'.' segment"),
    ("/etc/passwd", "is absolute"),
    ("a\x00b", "NUL byte"),
    ("a\\..\\b", "backslash"),
    ("", "empty"),
    ("a//b", "empty segment"),
    ("a/", "empty segment"),
    ("x" * 513, "513 characters long (at most 512)"),
    ("a b", "outside [A-Za-z0-9._=-]"),
    ("day/ü", "outside [A-Za-z0-9._=-]"),
]


@pytest.mark.parametrize(("key", "problem"), BAD_KEYS, ids=lambda v: repr(v)[:20])
def test_validate_key_names_the_problem(key: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        validate_key(key)


@pytest.mark.parametrize(("key", "problem"), BAD_KEYS[:7], ids=lambda v: repr(v)[:20])
def test_stores_refuse_bad_keys_before_touching_storage(
    store: ObjectStore, key: str, problem: str, tmp_path: Path
) -> None:
    for call in (
        lambda: store.put(key, b"x"),
        lambda: store.get(key),
        lambda: store.exists(key),
        lambda: store.delete(key),
        lambda: store.url(key),
    ):
        with pytest.raises(ValueError, match=re.escape(problem)):
            call()
    assert store.keys("") == []
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize("key", ["a", "2025-03-09/tenant=7/part-0001.jsonl.gz", "y" * 512])
def test_validate_key_accepts_relative_keys(key: str) -> None:
    assert validate_key(key) == key


def test_file_store_writes_atomically_and_lists_only_objects(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put(f"{DAY}/events.jsonl", b"first")
    store.put(f"{DAY}/events.jsonl", b"second")
    # No temporary file is left beside the object.
    assert sorted(p.name for p in (tmp_path / DAY).iterdir()) == ["events.jsonl"]
    # A write in flight (another process's, or one a crash interrupted) is not an object.
    (tmp_path / DAY / ".tmp~abc123").write_bytes(b"half")
    assert store.keys("") == [f"{DAY}/events.jsonl"]
    assert store.get(f"{DAY}/events.jsonl") == b"second"


def test_file_store_never_follows_a_symlink_out_of_its_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"not yours")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    store = FileStore(root)
    with pytest.raises(ValueError, match="resolves outside"):
        store.get("link/secret.txt")
    with pytest.raises(ValueError, match="resolves outside"):
        store.put("link/planted.txt", b"x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


@pytest.mark.slow
def test_s3_prefixes_keep_stores_apart(s3_store: S3Store, moto_endpoint: str) -> None:
    neighbour = S3Store(s3_store.bucket, "other", endpoint_url=moto_endpoint, **CREDENTIALS)
    s3_store.put(f"{DAY}/events.jsonl", b"mine")
    neighbour.put(f"{DAY}/events.jsonl", b"theirs")
    assert s3_store.get(f"{DAY}/events.jsonl") == b"mine"
    assert neighbour.keys("") == [f"{DAY}/events.jsonl"]
    assert (
        neighbour.url(f"{DAY}/events.jsonl") == f"s3://{s3_store.bucket}/other/{DAY}/events.jsonl"
    )
    s3_store.ensure_bucket()  # an existing bucket: nothing happens
    assert s3_store.keys("") == [f"{DAY}/events.jsonl"]


@pytest.mark.slow
def test_s3_keys_reads_every_page(s3_store: S3Store) -> None:
    # S3 answers at most 1,000 keys a page.
    keys = [f"{DAY}/part-{i:05d}" for i in range(1005)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: s3_store.put(key, b""), keys))
    assert s3_store.keys(f"{DAY}/") == keys


@pytest.mark.slow
def test_s3_missing_bucket_is_a_store_error_not_a_missing_object(moto_endpoint: str) -> None:
    store = S3Store(new_bucket(), endpoint_url=moto_endpoint, **CREDENTIALS)
    with pytest.raises(ObjectStoreError, match="NoSuchBucket") as info:
        store.get("k")
    assert not isinstance(info.value, ObjectMissing)
    assert info.value.url == f"s3://{store.bucket}/k"


def _chain(error: BaseException) -> str:
    text = []
    current: BaseException | None = error
    while current is not None:
        text.append(f"{current!s} {current!r}")
        current = current.__cause__ or current.__context__
    return "\n".join(text)


def test_s3_unreachable_endpoint_fails_soon_without_printing_the_secret() -> None:
    port = free_port()  # nothing listens there
    store = S3Store(new_bucket(), endpoint_url=f"http://127.0.0.1:{port}", **CREDENTIALS)
    for call in (
        lambda: store.put(f"{DAY}/events.jsonl", b"x"),
        lambda: store.get(f"{DAY}/events.jsonl"),
        lambda: store.exists(f"{DAY}/events.jsonl"),
        lambda: store.keys(""),
        store.ensure_bucket,
    ):
        started = time.monotonic()
        with pytest.raises(ObjectStoreError) as info:
            call()
        assert time.monotonic() - started < 20, "three tries with backoff, then give up"
        assert not isinstance(info.value, ObjectMissing)
        assert f"s3://{store.bucket}" in str(info.value)
        assert "Could not connect" in str(info.value)
        assert SECRET_KEY not in _chain(info.value)
        assert ACCESS_KEY not in _chain(info.value)


def test_s3_endpoint_with_credentials_in_it_is_refused() -> None:
    with pytest.raises(ValueError, match="must not hold credentials") as info:
        S3Store("bucket-x", endpoint_url="http://user:hunter22@127.0.0.1:9000")
    assert "hunter22" not in str(info.value)


def test_store_from_url_file_forms(tmp_path: Path) -> None:
    for url in (str(tmp_path), tmp_path.as_uri(), f"file://localhost{tmp_path}"):
        store = store_from_url(url, endpoint_url="http://ignored.invalid")
        assert isinstance(store, FileStore)
        assert store.root == tmp_path.resolve()
    store.put("k", b"v")
    assert (tmp_path / "k").read_bytes() == b"v"


@pytest.mark.slow
def test_store_from_url_s3(moto_endpoint: str) -> None:
    bucket = new_bucket()
    store = store_from_url(
        f"s3://{bucket}/history/daily/", endpoint_url=moto_endpoint, **CREDENTIALS
    )
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix) == (bucket, "history/daily")
    store.ensure_bucket()
    store.put(f"{DAY}/events.jsonl", b"v")
    assert store.url(f"{DAY}/events.jsonl") == f"s3://{bucket}/history/daily/{DAY}/events.jsonl"
    assert store.get(f"{DAY}/events.jsonl") == b"v"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://host/archive", "unsupported scheme 'ftp'"),
        ("archive/relative", "unsupported scheme '(none)'"),
        ("file://otherhost/archive", "not a local absolute path"),
        ("file:relative", "not a local absolute path"),
        ("s3:///prefix-only", "names no bucket"),
        ("s3://bucket/p?versionId=1", "query or fragment"),
        ("s3://bucket/../up", "'..' segment"),
    ],
)
def test_store_from_url_refuses(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        store_from_url(url)


def test_store_from_settings_defaults_to_a_folder(settings: Any, tmp_path: Path) -> None:
    settings.HISTORY_ARCHIVE_URL = ""
    settings.RETENTION_ARCHIVE_DIR = str(tmp_path / "retention")
    store = store_from_settings()
    assert isinstance(store, FileStore)
    assert store.root == (tmp_path / "retention").resolve()

    settings.RETENTION_ARCHIVE_DIR = ""
    store = store_from_settings()
    assert isinstance(store, FileStore)
    assert store.root == (settings.DATA_DIR / "archive").resolve()


@pytest.mark.slow
def test_store_from_settings_s3_takes_credentials_from_the_environment(
    settings: Any, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    bucket = new_bucket()
    settings.HISTORY_ARCHIVE_URL = f"s3://{bucket}/h"
    settings.HISTORY_ARCHIVE_S3_ENDPOINT = moto_endpoint
    settings.HISTORY_ARCHIVE_S3_REGION = "eu-west-1"
    store = store_from_settings()
    assert isinstance(store, S3Store)
    store.ensure_bucket()  # outside us-east-1: created with a location constraint
    store.put("k", b"v")
    assert store.get("k") == b"v"
    assert store.url("k") == f"s3://{bucket}/h/k"
