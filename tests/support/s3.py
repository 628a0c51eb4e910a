"""A real S3-compatible server for tests: moto's server, started as a subprocess
on a free loopback port (so pytest-xdist workers each have their own), answering
before the test begins and stopped after it.

    with moto_server(log_dir) as endpoint:   # "http://127.0.0.1:PORT"
        S3Store("bucket", endpoint_url=endpoint, **CREDENTIALS)

or the `moto_endpoint` fixture (one server per test module). moto accepts any
credentials; the dummy ones below are passed explicitly rather than through the
environment, so no other test's boto3 ever sees them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.net import free_port
from tests.support.procs import Proc, wait_for

ACCESS_KEY = "testing-access-key"
SECRET_KEY = "testing-secret-key-never-printed"
CREDENTIALS = {"access_key": ACCESS_KEY, "secret_key": SECRET_KEY, "region": "us-east-1"}


def _answers(proc: Proc, endpoint: str) -> bool:
    if not proc.alive():
        raise AssertionError(f"moto server exited:\n{proc.output()[-3000:]}")
    try:
        with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # an HTTP answer of any status: the server is up
    except OSError:
        return False


@contextlib.contextmanager
def moto_server(log_dir: Path) -> Iterator[str]:
    """moto's server on a free loopback port; yields its endpoint URL."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    # Its own dummy credentials too, so nothing it does reaches a real AWS account.
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    proc = Proc(f"moto-{port}", cmd, env, log_dir)
    try:
        wait_for(lambda: _answers(proc, endpoint), timeout=60, interval=0.2, what="moto to answer")
        yield endpoint
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint URL of a moto server shared by the module's tests (each test
    should use a bucket of its own)."""
    with moto_server(tmp_path_factory.mktemp("moto")) as endpoint:
        yield endpoint
