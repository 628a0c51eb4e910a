"""Naming rules shared by tenants and dispatch: which slugs a tenant may take, how a
slug maps to its secret environment variables, and which characters no name may hold.

Kept in the tenants app (dispatch imports tenants, never the reverse) so the rules
are applied once, at tenant creation and again wherever a name is used.
"""

from __future__ import annotations

import unicodedata

# The platform's own Celery queues are `{priority}.{duration}` (high/default/low),
# the benchmarks consume `bench.noop`, Celery's fallback queue is `celery`, and
# RabbitMQ reserves `amq.*`. A tenant's queue namespace is `<slug>.`: a tenant
# named after one of these would publish straight into the platform's queues.
# The first segment of every queue and exchange the platform (and Celery, and
# RabbitMQ) own: the priority queues, RabbitMQ's per-duration priority queues
# `dispatch.short`/`dispatch.long`, Celery's `celeryev.*` events and
# `reply.celery.pidbox`, `amq.*`.
RESERVED_SLUGS = frozenset(
    {"high", "default", "low", "dispatch", "bench", "celery", "celeryev", "reply", "amq"}
)

ENV_PREFIX = "SCHED_SECRET_"
# Between the tenant part and the secret name. A tenant part never contains it
# (slugs whose upper-cased form would are refused) and a secret name never does
# (the reference grammar forbids it), so the variable names one (tenant, name) pair.
ENV_SEPARATOR = "__"

# Invisible characters a name could use to look like another one (or to reverse
# the text around it: U+202E): besides the Unicode "format" category (bidi
# controls, zero-width space/joiners, BOM, word joiner, soft hyphen, tags), the
# line/paragraph separators and the Hangul fillers, which render as nothing.
_INVISIBLE_EXTRA = frozenset("\u2028\u2029\u115f\u1160\u3164\uffa0")


def slug_env_key(slug: str) -> str:
    """The tenant part of its secret variables: `data-eng` → `DATA_ENG`."""
    return slug.upper().replace("-", "_")


def slug_problem(slug: str) -> str | None:
    """Why `slug` cannot name a new tenant (beyond the slug syntax itself), or None."""
    if slug in RESERVED_SLUGS:
        return (
            f"'{slug}' is reserved: the platform's own queues use it "
            f"(reserved: {', '.join(sorted(RESERVED_SLUGS))})"
        )
    if ENV_SEPARATOR in slug_env_key(slug):
        return (
            "must not contain two separators in a row ('--', '__', '-_', '_-'): "
            "its secret variables would be ambiguous"
        )
    return None


def invisible_char(text: str) -> str | None:
    """The first bidi control or invisible character in `text`, as e.g. `U+202E RIGHT-TO-LEFT OVERRIDE`, or None."""
    for char in text:
        if char in _INVISIBLE_EXTRA or unicodedata.category(char) == "Cf":
            return f"U+{ord(char):04X} {unicodedata.name(char, 'unnamed')}"
    return None


# Model-field validators: the admin's forms (which bypass the services) apply them too.


def validate_slug_rules(value: str) -> None:
    from django.core.exceptions import ValidationError

    problem = slug_problem(value)
    if problem:
        raise ValidationError(problem, code="reserved_slug")


def validate_visible(value: str) -> None:
    from django.core.exceptions import ValidationError

    found = invisible_char(value)
    if found:
        raise ValidationError(
            f"must not contain bidi controls or invisible characters (found {found})",
            code="invisible_char",
        )
