"""The platform's Celery queue names, built here and nowhere else.

A schedule's messages go to `{priority}.{duration}` (high/default/low by
short/long); on RabbitMQ the priorities of one duration class share the
priority queue `dispatch.{duration}` (config/celery_app.amqp_queue). Plain
Python, no Django: settings and the Celery app import it too.
"""

from __future__ import annotations

# Highest first: a worker drains high before default before low.
PRIORITIES = ("high", "default", "low")
DURATIONS = ("short", "long")


def queue_name(priority: str, duration: str) -> str:
    """The Celery queue of a schedule's priority and duration class."""
    return f"{priority}.{duration}"


def split_queue_name(name: str) -> tuple[str, str]:
    """(priority, duration) of a `{priority}.{duration}` name; duration "" if it has none."""
    priority, _, duration = name.partition(".")
    return priority, duration


def amqp_queue_name(duration: str) -> str:
    """RabbitMQ: the one priority queue of a duration class."""
    return f"dispatch.{duration}"


DEFAULT_QUEUE = queue_name("default", "short")
# Every platform queue, priority by priority (the order metrics and pages list them in).
ALL_QUEUES = tuple(queue_name(p, d) for p in PRIORITIES for d in DURATIONS)


def queues_of(duration: str) -> tuple[str, ...]:
    """A duration class's queues, highest priority first (a worker's `-Q`)."""
    return tuple(queue_name(p, duration) for p in PRIORITIES)
