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


def default_of(value: str) -> str:
    """A compose `${NAME:-default}` value as it is with NAME unset."""
    match = re.fullmatch(r"\$\{[A-Z_]+:-(.*)\}", value)
    return match.group(1) if match else value


def app_environment() -> dict[str, str]:
    """What an app service's processes get by default: app.env, then `environment:`."""
    env = env_file("env/app.env")
    env.update({k: default_of(v) for k, v in load()["services"]["web"]["environment"].items()})
    return env


def test_app_env_points_at_the_stack_services() -> None:
    env = app_environment()
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


def test_the_ha_profile_runs_etcd_and_two_patroni_nodes_the_platform_reaches() -> None:
    """`--env-file compose/ha.env` turns the profile on and names every Patroni node in
    the platform's multi-host DATABASE_URL, as docs/how-to/ha-postgresql.md says."""
    from core import pg_urls

    services = load()["services"]
    for name in ("etcd", "pg1", "pg2"):
        assert services[name]["profiles"] == ["ha"], name
    assert "profiles" not in services["postgres"]  # the single-database default stays
    ha = env_file("ha.env")
    assert ha["COMPOSE_PROFILES"] == "ha"
    url = ha["STACK_DATABASE_URL"]
    hosts = [host for host, _ in pg_urls.hosts(url)]
    assert hosts == ["pg1", "pg2"]
    assert pg_urls.parse(url)["OPTIONS"]["target_session_attrs"] == "read-write"
    for app in ["web", "beat", "worker-short", "worker-long", "migrate"]:
        svc = services[app]
        assert svc["environment"]["DATABASE_URL"].startswith("${STACK_DATABASE_URL:-"), app
        for node in hosts:  # waited for when the profile runs them, ignored otherwise
            assert svc["depends_on"][node] == {"condition": "service_healthy", "required": False}
    for node in hosts:
        env = services[node]["environment"]
        assert env["PATRONI_NAME"] == node
        assert env["PATRONI_POSTGRESQL_CONNECT_ADDRESS"] == f"{node}:5432"
        assert services[node]["build"]["dockerfile"] == "compose/patroni/Dockerfile"
    # The platform's role and password are the ones post_bootstrap creates.
    assert pg_urls.parse(url)["PASSWORD"] == env_file("env/patroni.env")["SCHEDULER_DB_PASSWORD"]
    assert env_file("env/patroni.env")["PATRONI_ETCD3_HOSTS"] == "etcd:2379"


def test_the_patroni_nodes_promote_only_a_synchronous_standby() -> None:
    config = yaml.safe_load((COMPOSE / "patroni" / "patroni.yml").read_text())
    dcs = config["bootstrap"]["dcs"]
    assert dcs["synchronous_mode"] is True
    # Patroni's own rule for its timings.
    assert dcs["loop_wait"] + 2 * dcs["retry_timeout"] <= dcs["ttl"]
    assert dcs["postgresql"]["use_pg_rewind"] is True
    script = config["bootstrap"]["post_bootstrap"]
    assert script == "/etc/patroni/post-bootstrap.sh"
    dockerfile = (COMPOSE / "patroni" / "Dockerfile").read_text()
    assert "compose/patroni/post-bootstrap.sh" in dockerfile
    assert (COMPOSE / "patroni" / "post-bootstrap.sh").exists()
