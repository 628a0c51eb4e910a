"""Shared fixtures: tenants, principals and API clients for each persona
(admin / operator / viewer of the owner tenant, and an outsider tenant), and the
ledger (the recording loopback HTTP receiver targets call)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import cache
from rest_framework.test import APIClient

from tenants import services as tenant_services
from tenants.models import Tenant
from tenants.roles import Principal, Role
from tests.support import dbreset, dbtemplate
from tests.support.ledger import Ledger, Respond

# Transactional tests end with a DELETE of their rows, not a TRUNCATE of every table
# (the same empty database, about a second sooner per test: tests/support/dbreset.py).
dbreset.install()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """pytest-django's own (the _gwN suffix on xdist workers), plus: clone the test
    database from the run's migrated template when `python -m tests.tiers` built one
    (tests/support/dbtemplate.py)."""
    template = os.environ.get(dbtemplate.VARIABLE)
    if template:
        settings.DATABASES["default"].setdefault("TEST", {})["TEMPLATE"] = template


@pytest.fixture(autouse=True)
def _clear_cache() -> None:
    # Throttle counters live in Redis; each test starts with a clean budget.
    cache.clear()


@pytest.fixture(scope="module")
def ledger_respond() -> Respond | None:
    """What a module's ledgers answer (None: 200 "ok"); a module overrides this fixture
    to answer otherwise. A test may still set `ledger.respond` for itself."""
    return None


@pytest.fixture
def ledger(ledger_respond: Respond | None) -> Iterator[Ledger]:
    """A recording receiver of the test's own, closed when the test ends."""
    with Ledger(ledger_respond) as ledger:
        yield ledger


@pytest.fixture
def tenant(db: Any) -> Tenant:
    return tenant_services.tenant_create(slug="billing", name="Billing")


@pytest.fixture
def other_tenant(db: Any) -> Tenant:
    return tenant_services.tenant_create(slug="outsider", name="Outsider")


def make_principal(tenant: Tenant, role: Role = Role.ADMIN) -> Principal:
    return Principal(
        tenant=tenant, role=role, actor_kind="system", actor_id="test", label=f"test:{role.label}"
    )


@pytest.fixture
def admin_principal(tenant: Tenant) -> Principal:
    return make_principal(tenant, Role.ADMIN)


@pytest.fixture
def api_for(db: Any) -> Callable[[Tenant, Role], APIClient]:
    def make(tenant: Tenant, role: Role = Role.ADMIN) -> APIClient:
        _, raw = tenant_services.token_issue(tenant=tenant, name=f"{role.label}-client", role=role)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        client.raw_token = raw  # type: ignore[attr-defined]
        return client

    return make


@pytest.fixture
def api(api_for: Callable[[Tenant, Role], APIClient], tenant: Tenant) -> APIClient:
    return api_for(tenant, Role.ADMIN)


@pytest.fixture
def outsider_api(api_for: Callable[[Tenant, Role], APIClient], other_tenant: Tenant) -> APIClient:
    return api_for(other_tenant, Role.ADMIN)


SEED_EXAMPLE: dict[str, Any] = {
    "name": "nightly-demurrage-ROTTERDAM",
    "tenant": "billing",
    "cron": "0 0 * * *",
    "timezone": "Europe/Amsterdam",
    "target": {"type": "http", "url": "https://billing.internal/jobs/demurrage", "timeout_s": 900},
    "retry": {"max_attempts": 5, "backoff": "exponential", "initial_s": 30},
    "concurrency": "forbid",
    "misfire": "run_once",
    "jitter_s": 120,
}


@pytest.fixture
def seed_example() -> dict[str, Any]:
    import copy

    return copy.deepcopy(SEED_EXAMPLE)
