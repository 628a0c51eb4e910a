"""Production settings pass Django's deployment checks, warnings included."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def check_deploy(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="config.production",
            SECRET_KEY=secrets.token_urlsafe(50),
            **env,
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings() -> None:
    res = check_deploy(PLATFORM_URL="https://scheduler.example.com")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no issues" in res.stdout


def test_check_deploy_names_a_platform_url_left_at_its_development_default() -> None:
    for url in ("http://127.0.0.1:8000", "https://localhost", "http://scheduler.example.com"):
        res = check_deploy(PLATFORM_URL=url)
        assert res.returncode != 0, url
        assert "dispatch.W001" in res.stderr and f"PLATFORM_URL is '{url}'" in res.stderr


def test_production_settings_refuse_to_start_without_a_secret_key() -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "SECRET_KEY_FILE"}}
    env["DJANGO_SETTINGS_MODULE"] = "config.production"
    res = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0 and "SECRET_KEY" in res.stderr


def test_secret_key_can_come_from_a_file(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(secrets.token_urlsafe(50))
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    env.update(DJANGO_SETTINGS_MODULE="config.production", SECRET_KEY_FILE=str(key_file))
    code = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == key_file.read_text()


def test_production_ignores_the_test_escape_hatches() -> None:
    """TARGET_TEST_ALLOW and the test client's `testserver` host exist for tests only."""
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="config.production",
        SECRET_KEY=secrets.token_urlsafe(50),
        TARGET_TEST_ALLOW="127.0.0.1:9911",
        ALLOWED_HOSTS="scheduler.example.com,testserver",
    )
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    code = (
        "import django, ipaddress; django.setup()\n"
        "from django.conf import settings\n"
        "from dispatch.targets import netguard\n"
        "print(settings.TARGET_TEST_ALLOW, settings.ALLOWED_HOSTS)\n"
        "try:\n"
        "    netguard.check_ip(ipaddress.ip_address('127.0.0.1'), allow=netguard.AllowList.parse([]), port=9911)\n"
        "    print('loopback allowed')\n"
        "except netguard.Denied as exc:\n"
        "    print('denied:', exc)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "[] ['scheduler.example.com']"
    assert "denied: 127.0.0.1 is a loopback address" in res.stdout
    # Without ALLOWED_HOSTS the local defaults apply, still without `testserver`.
    env.pop("ALLOWED_HOSTS")
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "testserver" not in res.stdout.splitlines()[0]


def test_production_serves_collected_hashed_static_files_under_gunicorn(tmp_path: Path) -> None:
    """collectstatic (as compose/Dockerfile runs it), then gunicorn: the pages link
    hashed names, WhiteNoise serves them with their types and far-future caching."""
    import re
    import socket
    import time
    import urllib.request

    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="config.production",
        SECRET_KEY=secrets.token_urlsafe(50),
        STATIC_ROOT=str(tmp_path / "static"),
        SECURE_SSL_REDIRECT="false",
    )
    collected = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert collected.returncode == 0, collected.stderr[-3000:]
    assert (tmp_path / "static" / "staticfiles.json").exists()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gunicorn = Path(sys.executable).parent / "gunicorn"
    web = subprocess.Popen(
        [str(gunicorn), "config.wsgi:application", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        page = ""
        while time.monotonic() < deadline and web.poll() is None:
            try:
                with urllib.request.urlopen(base + "/login/", timeout=5) as resp:
                    page = resp.read().decode()
                    break
            except OSError:
                time.sleep(0.3)
        assert page, web.stderr.read() if web.poll() is not None and web.stderr else "no page"
        links = re.findall(r'(?:href|src)="(/static/[^"]+)"', page)
        css = next(u for u in links if u.endswith(".css"))
        js = next(u for u in links if "htmx" in u)
        assert re.search(r"console\.[0-9a-f]{12}\.css$", css), css
        for url, kind in ((css, "text/css"), (js, "javascript")):
            with urllib.request.urlopen(base + url, timeout=10) as resp:
                assert resp.status == 200
                assert kind in resp.headers["Content-Type"], resp.headers["Content-Type"]
                assert "immutable" in resp.headers.get("Cache-Control", ""), resp.headers
    finally:
        web.terminate()
        web.wait(20)
