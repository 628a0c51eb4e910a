"""Kubernetes CronJobs (batch/v1, batch/v1beta1) → schedule definitions.

A multi-document manifest; `List` items are read too; other kinds are Problems
naming the kind. Mapping: schedule → cron (a `TZ=`/`CRON_TZ=` prefix gives the
zone, reported since Kubernetes 1.27 rejects it), spec.timeZone → timezone,
concurrencyPolicy → concurrency, startingDeadlineSeconds → misfire run_once with
that grace (absent: the platform's default policy, skip with DEFAULT_MISFIRE_GRACE_S,
60 s), suspend → paused, backoffLimit → retry.max_attempts = backoffLimit + 1,
activeDeadlineSeconds → the target's timeout_s. Document numbers (1-based) stand
in for line numbers in Problems.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from scheduler_client.importers import (
    ImportResult,
    Problem,
    TemplateError,
    cron_problem,
    fill_template,
    unique_name,
)

__all__ = ["parse_manifest"]

_API_VERSIONS = ("batch/v1", "batch/v1beta1")
_CONCURRENCY = {"Allow": "allow", "Forbid": "forbid", "Replace": "replace"}
_TIMEOUT_TARGETS = ("http", "command", "queue")  # target types with a timeout_s
TEMPLATE_REQUIRED = (
    "--target-template is required for CronJobs: the platform does not run containers; "
    'say what each job should call, e.g. \'{"type": "http", "method": "POST", '
    '"url": "https://jobs.internal/run/{name}", "body": "{command}"}\' '
    "({name}, {image} and {command} are filled in)"
)


def _documents(text: str, source: str) -> list[tuple[int, Any]]:
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not YAML: {exc}") from None
    out: list[tuple[int, Any]] = []
    for index, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out.extend((index, item) for item in doc.get("items") or [])
        else:
            out.append((index, doc))
    return out


def _container_command(job_spec: dict[str, Any]) -> tuple[str, str]:
    pod = (job_spec.get("template") or {}).get("spec") or {}
    containers = pod.get("containers") or [{}]
    first = containers[0] if isinstance(containers[0], dict) else {}
    argv = [str(a) for a in (first.get("command") or []) + (first.get("args") or [])]
    return str(first.get("image") or ""), shlex.join(argv)


def parse_manifest(text: str, *, source: str, template: dict[str, Any] | None) -> ImportResult:
    """Definitions for the manifest's CronJobs; Problems for the rest."""
    if template is None:
        raise TemplateError(TEMPLATE_REQUIRED)
    result = ImportResult()
    docs = _documents(text, source)
    cronjobs = [
        (i, d)
        for i, d in docs
        if isinstance(d, dict)
        and d.get("kind") == "CronJob"
        and d.get("apiVersion") in _API_VERSIONS
    ]
    namespaces = {((d.get("metadata") or {}).get("namespace") or "default") for _, d in cronjobs}
    names: set[str] = set()

    for index, doc in docs:
        if not isinstance(doc, dict):
            result.problems.append(Problem(source, index, str(doc)[:80], "not a Kubernetes object"))
            continue
        kind, api = doc.get("kind"), doc.get("apiVersion")
        meta = doc.get("metadata") or {}
        label = f"{kind} {meta.get('name', '?')}"
        if kind != "CronJob":
            result.problems.append(
                Problem(source, index, label, f"kind {kind} is not a CronJob: not imported")
            )
            continue
        if api not in _API_VERSIONS:
            result.problems.append(
                Problem(source, index, label, f"apiVersion {api} is not batch/v1 or batch/v1beta1")
            )
            continue
        _cronjob(doc, index, label, source, template, len(namespaces) > 1, names, result)
    return result


def _cronjob(
    doc: dict[str, Any],
    index: int,
    label: str,
    source: str,
    template: dict[str, Any],
    several_namespaces: bool,
    names: set[str],
    result: ImportResult,
) -> None:
    def problem(reason: str) -> None:
        result.problems.append(Problem(source, index, label, reason))

    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    name = str(meta.get("name") or "cronjob")
    if several_namespaces:
        name = f"{meta.get('namespace') or 'default'}-{name}"
    expr = str(spec.get("schedule") or "").strip()
    zone = spec.get("timeZone") or "UTC"
    if expr.startswith(("TZ=", "CRON_TZ=")):
        prefix, _, expr = expr.partition(" ")
        prefix_zone = prefix.split("=", 1)[1]
        problem(
            f"schedule prefix {prefix} is rejected by Kubernetes since 1.27 "
            "(use spec.timeZone); imported with that zone"
        )
        if spec.get("timeZone") and spec["timeZone"] != prefix_zone:
            problem(
                f"spec.timeZone {spec['timeZone']} and the prefix {prefix_zone} disagree: "
                "using spec.timeZone"
            )
        else:
            zone = prefix_zone
    if not expr:
        problem("spec.schedule is missing")
        return
    reason = cron_problem(expr, zone)
    if reason:
        problem(f"schedule {expr!r} in {zone}: {reason}")
        return

    job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    image, command = _container_command(job_spec)
    final = unique_name(name, names)
    definition: dict[str, Any] = {
        "name": final,
        "cron": expr,
        "timezone": zone,
        "target": fill_template(template, {"name": final, "image": image, "command": command}),
    }
    policy = spec.get("concurrencyPolicy", "Allow")
    if policy in _CONCURRENCY:
        definition["concurrency"] = _CONCURRENCY[policy]
    else:
        problem(
            f"concurrencyPolicy {policy!r} is not Allow, Forbid or Replace; "
            "the platform default (forbid) applies"
        )
    deadline = spec.get("startingDeadlineSeconds")
    if isinstance(deadline, int) and not isinstance(deadline, bool):
        definition["misfire"] = "run_once"
        definition["misfire_grace_s"] = deadline
    if spec.get("suspend") is True:
        definition["paused"] = True
    backoff = job_spec.get("backoffLimit")
    if isinstance(backoff, int) and not isinstance(backoff, bool):
        definition["retry"] = {"max_attempts": backoff + 1}
    active = job_spec.get("activeDeadlineSeconds")
    if isinstance(active, int) and not isinstance(active, bool):
        if definition["target"].get("type") in _TIMEOUT_TARGETS:
            definition["target"]["timeout_s"] = active
        else:
            problem("activeDeadlineSeconds has no equivalent for this target type")
    for key in ("successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        if key in spec:
            problem(
                f"{key} has no equivalent: the platform keeps run history by its retention settings"
            )
    result.definitions.append(definition)
