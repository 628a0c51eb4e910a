"""reference/metrics.md: the Prometheus metrics of `/metrics`, from dispatch/ops/metrics.py.

The collector builds its metric families at scrape time from database queries,
so there is no registry to list. The page reads the collector's source instead:
every `…MetricFamily(name, help, labels=…)` call and every `_histogram(name, help, …)`
call, with their literal arguments (f-strings are filled from the module's own
constants). The exposed sample names (`_total`, `_bucket`, …) are the ones
prometheus_client writes for a family of that type. Anything the reader cannot
take literally fails the build.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any

from reference_pages.markdown import GENERATED_NOTE, code, inline, paragraphs, table

CONSTRUCTORS = {
    "CounterMetricFamily": "counter",
    "GaugeMetricFamily": "gauge",
    "HistogramMetricFamily": "histogram",
    "SummaryMetricFamily": "summary",
    "_histogram": "histogram",  # the module's helper around HistogramMetricFamily
}

# What each label's values are.
LABELS = {
    "tenant": "the tenant's slug",
    "state": "an execution state",
    "kind": "an [execution event kind](events.md#execution-event-kinds)",
    "queue": "a Celery queue",
}
REDIS_ONLY = "scheduler_queue_depth"


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str
    help: str
    labels: tuple[str, ...]


def _text(node: ast.AST, module: Any) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name):
                parts.append(str(getattr(module, value.value.id)))
            else:
                parts.append(_text(value, module))
        return "".join(parts)
    raise ValueError(f"line {node.lineno}: not a literal text: {ast.unparse(node)}")


def read_metrics(module: Any) -> list[Metric]:
    tree = ast.parse(inspect.getsource(module))
    # The helper's own body builds a family from its parameters: its callers are the metrics.
    helpers = [
        range(node.lineno, (node.end_lineno or node.lineno) + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name in CONSTRUCTORS
    ]
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        kind = CONSTRUCTORS.get(node.func.id)
        if kind is None or any(node.lineno in lines for lines in helpers):
            continue
        if len(node.args) < 2:
            raise ValueError(f"line {node.lineno}: {ast.unparse(node)} has no name and help")
        labels: tuple[str, ...] = ()
        for keyword in node.keywords:
            if keyword.arg == "labels":
                labels = tuple(ast.literal_eval(keyword.value))
        found.append(Metric(_text(node.args[0], module), kind, _text(node.args[1], module), labels))
    if not found:
        raise ValueError(f"no metric families found in {module.__name__}")
    return sorted(found, key=lambda m: m.name)


def exposed_names(metric: Metric) -> list[str]:
    """The sample names prometheus_client writes for the family (one sample each)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        SummaryMetricFamily,
    )
    from prometheus_client.registry import Collector

    family: Any
    labels = list(metric.labels)
    values = ["x"] * len(labels)
    if metric.kind == "counter":
        family = CounterMetricFamily(metric.name, metric.help, labels=labels)
        family.add_metric(values, 1)
    elif metric.kind == "gauge":
        family = GaugeMetricFamily(metric.name, metric.help, labels=labels)
        family.add_metric(values, 1)
    elif metric.kind == "histogram":
        family = HistogramMetricFamily(metric.name, metric.help, labels=labels)
        family.add_metric(values, [("1", 1.0), ("+Inf", 1.0)], 1.0)
    else:
        family = SummaryMetricFamily(metric.name, metric.help, labels=labels)
        family.add_metric(values, 1, 1.0)

    class One(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield family

    registry = CollectorRegistry()
    registry.register(One())
    names: list[str] = []
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            if name not in names:
                names.append(name)
    return names


def render() -> str:
    from dispatch.ops import metrics as module

    found = read_metrics(module)
    # The words below describe these labels and this Redis-only metric: a new label,
    # or a renamed metric, must be described here before the page builds.
    labels = {label for m in found for label in m.labels}
    if labels - set(LABELS):
        raise ValueError(f"labels {sorted(labels - set(LABELS))} are not described in {__name__}")
    if REDIS_ONLY not in {m.name for m in found}:
        raise ValueError(f"{REDIS_ONLY} is no longer a metric: update {__name__}")
    rows = [
        [
            ", ".join(code(n) for n in exposed_names(m)),
            m.kind,
            ", ".join(code(label) for label in m.labels),
            inline(m.help),
        ]
        for m in found
    ]
    return "\n".join(
        [
            GENERATED_NOTE,
            "# Metrics\n",
            paragraphs(module.__doc__) + "\n",
            "Every metric of `GET /metrics`, read from the collector's code "
            "(`dispatch/ops/metrics.py`):\n",
            table(("name", "type", "labels", "what it measures"), rows),
            "Label values: "
            + "; ".join(
                f"{code(label)}: {text}" for label, text in LABELS.items() if label in labels
            )
            + f". The queues: {', '.join(code(q) for q in module.QUEUES)}. {code(REDIS_ONLY)} is "
            "reported only when the broker is Redis.\n",
            f"The lag histograms' buckets (seconds): "
            f"{', '.join(code(b) for b in module.LAG_BUCKETS)}.\n",
        ]
    )
