"""Object stores for the execution-history archive: S3-compatible storage
(`S3Store`, through boto3) and a local folder (`FileStore`, the embedded default)
behind one small interface, `ObjectStore`.

Keys are checked by one function (`validate_key`) for both stores, so a key that
works on a laptop's folder works the same on S3 and cannot leave either store's
root. Errors are `ObjectStoreError` (or `ObjectMissing`), whose message names the
object's location and never a credential.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlsplit

MAX_KEY_LENGTH = 512
_SEGMENT = re.compile(r"[A-Za-z0-9._=-]+")
# FileStore's in-flight files carry a character no key may hold, so listing never
# mistakes a half-written file for an object.
_TEMP_PREFIX = ".tmp~"


class ObjectStoreError(Exception):
    """A store operation failed; `url` is the object's (or the store's) location."""

    def __init__(self, url: str, problem: str) -> None:
        self.url = url
        super().__init__(f"{url}: {problem}")


class ObjectMissing(ObjectStoreError):
    """No object under that key."""

    def __init__(self, url: str) -> None:
        super().__init__(url, "no such object")


@runtime_checkable
class ObjectStore(Protocol):
    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes:
        """The object's bytes; ObjectMissing when there is none."""
        ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None:
        """Remove the object; deleting an absent key is not an error (as on S3)."""
        ...

    def keys(self, prefix: str = "") -> list[str]:
        """Every key starting with `prefix` (a plain string prefix, as on S3), sorted."""
        ...

    def url(self, key: str) -> str:
        """Where the object lives, for people: s3://bucket/prefix/key or file:///path/key."""
        ...


def validate_key(key: str) -> str:
    """`key` when it is a relative, '/'-separated path of [A-Za-z0-9._=-] segments;
    else ValueError saying what is wrong with it."""
    if not isinstance(key, str):
        raise ValueError(f"object key must be a string, not {type(key).__name__}")
    if not key:
        raise ValueError("object key is empty")
    if "\x00" in key:
        raise ValueError("object key contains a NUL byte")
    if "\\" in key:
        raise ValueError(f"object key {key!r} contains a backslash (separate segments with '/')")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"object key is {len(key)} characters long (at most {MAX_KEY_LENGTH})")
    if key.startswith("/"):
        raise ValueError(f"object key {key!r} is absolute (keys are relative to the store)")
    for segment in key.split("/"):
        if not segment:
            raise ValueError(f"object key {key!r} has an empty segment ('//' or a trailing '/')")
        if segment in (".", ".."):
            raise ValueError(f"object key {key!r} has a {segment!r} segment")
        if not _SEGMENT.fullmatch(segment):
            raise ValueError(
                f"object key {key!r} has a character outside [A-Za-z0-9._=-] in {segment!r}"
            )
    return key


def _validate_prefix(prefix: str) -> str:
    # A listing prefix may end inside a segment ("2025-01-0") or with '/', and may be
    # empty; whatever precedes a trailing '/' must be a valid key.
    if prefix and prefix != "/":
        validate_key(prefix.removesuffix("/"))
    elif prefix:
        raise ValueError("listing prefix '/' is absolute (use '' for every key)")
    return prefix


def _is_key(candidate: str) -> bool:
    try:
        validate_key(candidate)
    except ValueError:
        return False
    return True


class FileStore:
    """Objects as files under `root`: written atomically (a reader sees the old
    bytes or the new, never part of them, even across a crash), never outside `root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / validate_key(key)).resolve()
        # Valid keys cannot climb out, but a symlink inside the root still could.
        if not path.is_relative_to(self.root):
            raise ValueError(f"object key {key!r} resolves outside {self.root.as_uri()}")
        return path

    def url(self, key: str) -> str:
        return (self.root / validate_key(key)).as_uri()

    @contextlib.contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        try:
            yield
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise ObjectMissing(self.url(key)) from exc
        except OSError as exc:
            raise ObjectStoreError(self.url(key), exc.strerror or str(exc)) from exc

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        with self._errors(key):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(temp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
                raise
            # The rename is durable only once the directory entry is on disk too.
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def get(self, key: str) -> bytes:
        path = self._path(key)
        with self._errors(key):
            return path.read_bytes()

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        path = self._path(key)
        with self._errors(key), contextlib.suppress(FileNotFoundError, IsADirectoryError):
            path.unlink()

    def keys(self, prefix: str = "") -> list[str]:
        _validate_prefix(prefix)
        # Walk only the folder the prefix's complete segments name, not the whole archive.
        start = self.root / prefix.rpartition("/")[0]
        found = []
        for folder, _dirs, files in os.walk(start):
            for name in files:
                key = (Path(folder) / name).relative_to(self.root).as_posix()
                if key.startswith(prefix) and _is_key(key):
                    found.append(key)
        return sorted(found)


class S3Store:
    """Objects in an S3 bucket (AWS or any S3-compatible server), under an optional
    key prefix. Credentials left as None come from boto3's standard chain
    (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, an instance role)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        import boto3
        from botocore.config import Config

        if not bucket:
            raise ValueError("S3 bucket name is empty")
        if endpoint_url and urlsplit(endpoint_url).password is not None:
            # It would be printed in every error message that names the endpoint.
            raise ValueError("S3 endpoint URL must not hold credentials; use the AWS_* variables")
        self.bucket = bucket
        self.prefix = validate_key(prefix.strip("/")) if prefix.strip("/") else ""
        self.region = region
        config = Config(
            connect_timeout=5,
            read_timeout=30,
            retries={"max_attempts": 3, "mode": "standard"},
            # Our own Content-MD5 already has the server verify each upload; botocore's
            # newer default checksums are not understood by every S3-compatible server.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            # Self-hosted servers (MinIO, moto, Ceph) are reached by address, where a
            # bucket cannot be a subdomain.
            s3={"addressing_style": "path"} if endpoint_url else None,
        )
        self._client: Any = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url or None,
            region_name=region,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=config,
        )

    def _full(self, key: str) -> str:
        validate_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._full(key)}"

    def _store_url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @contextlib.contextmanager
    def _errors(self, where: str) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                raise ObjectMissing(where) from exc
            message = error.get("Message") or exc.response.get("ResponseMetadata", {}).get(
                "HTTPStatusCode", ""
            )
            raise ObjectStoreError(where, f"{code or 'error'}: {message}".rstrip(": ")) from exc
        except BotoCoreError as exc:
            # Connection refused or timed out, no credentials, a body cut short: botocore's
            # messages name the endpoint and the operation, not the keys.
            raise ObjectStoreError(where, str(exc)) from exc

    def put(self, key: str, data: bytes) -> None:
        md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        with self._errors(self.url(key)):
            self._client.put_object(
                Bucket=self.bucket, Key=self._full(key), Body=data, ContentMD5=md5
            )

    def get(self, key: str) -> bytes:
        with self._errors(self.url(key)):
            response = self._client.get_object(Bucket=self.bucket, Key=self._full(key))
            return bytes(response["Body"].read())

    def exists(self, key: str) -> bool:
        try:
            with self._errors(self.url(key)):
                self._client.head_object(Bucket=self.bucket, Key=self._full(key))
        except ObjectMissing:
            return False
        return True

    def delete(self, key: str) -> None:
        with self._errors(self.url(key)):
            self._client.delete_object(Bucket=self.bucket, Key=self._full(key))

    def keys(self, prefix: str = "") -> list[str]:
        _validate_prefix(prefix)
        strip = f"{self.prefix}/" if self.prefix else ""
        found: list[str] = []
        with self._errors(self._store_url()):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=strip + prefix
            )
            for page in pages:
                found.extend(item["Key"].removeprefix(strip) for item in page.get("Contents", []))
        return sorted(found)

    def ensure_bucket(self) -> None:
        """Create the bucket unless it exists (tests, the embedded setup)."""
        from botocore.exceptions import ClientError

        with self._errors(f"s3://{self.bucket}"):
            try:
                self._client.head_bucket(Bucket=self.bucket)
                return
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code")) not in ("404", "NoSuchBucket"):
                    raise
            # us-east-1 is S3's one region that refuses an explicit location constraint.
            where = (
                {}
                if self.region == "us-east-1"
                else {"CreateBucketConfiguration": {"LocationConstraint": self.region}}
            )
            try:
                self._client.create_bucket(Bucket=self.bucket, **where)
            except ClientError as exc:
                # Another process created it between our check and our create.
                if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                    raise


def store_from_url(url: str, **s3_options: Any) -> ObjectStore:
    """The store a URL names: `file:///abs/path` or `/abs/path` (a FileStore; any
    s3_options are ignored), or `s3://bucket/optional/prefix` (an S3Store, given
    s3_options: endpoint_url, region, access_key, secret_key)."""
    if url.startswith("/"):
        return FileStore(Path(url))
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(f"archive URL {url!r} must not have a query or fragment")
    if parts.scheme == "file":
        path = unquote(parts.path)
        if parts.netloc not in ("", "localhost") or not path.startswith("/"):
            raise ValueError(f"archive URL {url!r} is not a local absolute path (file:///path)")
        return FileStore(Path(path))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(f"archive URL {url!r} names no bucket (s3://bucket/prefix)")
        return S3Store(parts.netloc, parts.path.strip("/"), **s3_options)
    raise ValueError(
        f"archive URL {url!r}: unsupported scheme {parts.scheme or '(none)'!r}; "
        "use file:///absolute/path, an absolute path, or s3://bucket/prefix"
    )


def store_from_settings() -> ObjectStore:
    """The archive the settings name (HISTORY_ARCHIVE_URL and its S3 options)."""
    from django.conf import settings

    if not settings.HISTORY_ARCHIVE_URL:
        # No URL: a local folder, so the embedded platform archives with no setup.
        root = settings.RETENTION_ARCHIVE_DIR or settings.DATA_DIR / "archive"
        return FileStore(Path(root))
    return store_from_url(
        settings.HISTORY_ARCHIVE_URL,
        endpoint_url=settings.HISTORY_ARCHIVE_S3_ENDPOINT or None,
        region=settings.HISTORY_ARCHIVE_S3_REGION,
    )
