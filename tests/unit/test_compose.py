"""Docker cannot run here, so the compose stack is validated by structure: every
service the design names is there, every command and script it runs exists in the
project, and every environment variable it sets is one the project reads."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
# Read by libraries or the container tooling rather than by our code.
EXTERNAL_VARS = {
    "DJANGO_SETTINGS_MODULE",
    "OTEL_SERVICE_NAME",
    "POSTGRES_USER",
    "POSTGRES_PASSWORD",
    "POSTGRES_DB",
    "RABBITMQ_DEFAULT_USER",
    "RABBITMQ_DEFAULT_PASS",
    "VAULT_DEV_ROOT_TOKEN_ID",
    "VAULT_DEV_LISTEN_ADDRESS",
}


def load() -> dict[str, Any]:
    return yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())


def env_file(name: str) -> dict[str, str]:
    out = {}
    for line in (COMPOSE / name).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def project_text() -> str:
    parts = [p.read_text() for p in ROOT.glob("config/*.py")]
    parts += [
        p.read_text() for d in ("core", "dispatch", "bench") for p in ROOT.glob(f"{d}/**/*.py")
    ]
    parts += [p.read_text() for p in (COMPOSE / "scripts").glob("*.sh")]
    return "\n".join(parts)


def test_every_service_of_the_design_is_present() -> None:
    services = load()["services"]
    for name in [
        "postgres",
        "rabbitmq",
        "redis",
        "vault",
        "otel-collector",
        "web",
        "beat",
        "worker-short",
        "worker-long",
        "migrate",
    ]:
        assert name in services, name
    assert services["beat"]["deploy"]["replicas"] >= 2
    for app in ["web", "beat", "worker-short", "worker-long", "migrate"]:
        assert services[app]["build"]["dockerfile"] == "compose/Dockerfile"
        assert (ROOT / services[app]["build"]["dockerfile"]).exists()


def test_files_the_stack_mounts_or_reads_exist() -> None:
    for name, svc in load()["services"].items():
        files = svc.get("env_file", [])
        for f in [files] if isinstance(files, str) else files:
            assert (COMPOSE / f).exists(), (name, f)
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                assert (COMPOSE / src).exists(), (name, src)


def test_every_command_and_script_exists_in_the_project() -> None:
    from django.core.management import get_commands

    commands = get_commands()
    for name, svc in load()["services"].items():
        cmd = svc.get("command")
        if not (isinstance(cmd, list) and cmd[:1] == ["sh"] and cmd[1].startswith("compose/")):
            continue
        script = ROOT / cmd[1]
        assert script.exists(), (name, script)
        # Continuation lines are one command (`\` + newline), as the shell reads them.
        for line in script.read_text().replace("\\\n", " ").splitlines():
            words = (
                shlex.split(line.replace("exec ", ""), posix=True)
                if line and not line.startswith("#")
                else []
            )
            if words[:2] == ["python", "manage.py"]:
                assert words[2] in commands, (script.name, words[2])
            if words[:1] == ["gunicorn"]:
                module, _, attr = words[1].partition(":")
                assert (ROOT / (module.replace(".", "/") + ".py")).exists()
                assert attr in (ROOT / (module.replace(".", "/") + ".py")).read_text()
            if words[:1] == ["celery"]:
                assert words[1:3] == ["-A", "config"]
                queues = words[words.index("-Q") + 1].split(",")
                assert all(re.fullmatch(r"(high|default|low)\.(short|long)", q) for q in queues), (
                    queues
                )


def test_every_env_var_is_read_by_the_project() -> None:
    text = project_text()
    for name in ["app.env", "postgres.env", "rabbitmq.env", "vault.env"]:
        for key in env_file(f"env/{name}"):
            if key in EXTERNAL_VARS or (key.startswith("VAULT_") and name == "vault.env"):
                continue
            assert re.search(rf"['\"\$]{{?{key}\b", text), (
                f"{key} (compose/env/{name}) is read nowhere"
            )


def test_app_env_points_at_the_stack_services() -> None:
    env = env_file("env/app.env")
    services = load()["services"]
    for key in [
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "REDIS_URL",
        "VAULT_ADDR",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]:
        host = re.sub(r"^[a-z+]+://([^@/]*@)?", "", env[key]).split(":")[0].split("/")[0]
        assert host in services, (key, host)
