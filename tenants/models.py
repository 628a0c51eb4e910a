"""Tenants, quotas, memberships (RBAC), service tokens and the audit log."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q, Value
from django.db.models.functions import Now, Replace, Upper

from tenants.naming import validate_slug_rules, validate_visible
from tenants.roles import ROLE_CHOICES, Role


def new_signing_key() -> str:
    """A fresh HMAC key for signing the tenant's outgoing HTTP callbacks."""
    return secrets.token_hex(32)


class Tenant(models.Model):
    """A team using the platform. Tenants are deactivated, never deleted (the audit keeps them).

    `signing_key` signs every HTTP callback (X-Signature) so the tenant's services
    can tell the platform's calls from forgeries; `alert_webhook_url` /
    `alert_email` receive the notice when an execution ends `dead`.
    """

    slug = models.SlugField(max_length=63, unique=True, validators=[validate_slug_rules])
    name = models.CharField(max_length=200, validators=[validate_visible])
    active = models.BooleanField(default=True)
    # Operator-managed egress allow-list for HTTP targets: CIDRs ("10.20.0.0/16")
    # and host patterns ("*.billing.internal"). Private ranges are reachable only
    # through it; the always-denied ranges never are (see dispatch/targets/netguard.py).
    egress_allow = models.JSONField(default=list, blank=True)
    signing_key = models.CharField(max_length=64, default=new_signing_key)
    alert_webhook_url = models.URLField(max_length=2048, blank=True)
    alert_email = models.EmailField(blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["slug"]
        constraints = [
            # `a-b` and `a_b` (or `A-b`) would read the same SCHED_SECRET_A_B__* variables
            # (tenants.naming.slug_env_key): one of them must not exist.
            models.UniqueConstraint(
                Upper(Replace("slug", Value("-"), Value("_"))),
                name="tenant_slug_env_key_unique",
                violation_error_message="another tenant's slug maps to the same secret variables",
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class TenantQuota(models.Model):
    """Limits enforced at dispatch (concurrency, daily executions) and at creation (schedules)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")
    max_concurrent = models.PositiveIntegerField(default=10)
    max_executions_per_day = models.PositiveIntegerField(default=100_000)
    max_schedules = models.PositiveIntegerField(default=1_000)
    weight = models.PositiveIntegerField(
        default=1, help_text="fair-share weight when capacity is short"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(weight__gte=1), name="tenantquota_weight_positive"),
        ]

    def __str__(self) -> str:
        return f"quota of {self.tenant_id}"


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=ROLE_CHOICES)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "tenant"], name="membership_user_tenant_unique"
            ),
            models.CheckConstraint(
                condition=Q(role__in=[r.label for r in Role]), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.tenant_id}:{self.role}"


class ServiceToken(models.Model):
    """An API token. Only a SHA-256 digest is stored; the secret is shown once.

    Tokens look like `sched_<prefix8>_<secret>`; `prefix` ("sched_ab12cd34")
    is stored in clear so a token can be recognised in lists and logs.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100, validators=[validate_visible])
    role = models.CharField(max_length=16, choices=ROLE_CHOICES)
    prefix = models.CharField(max_length=32, unique=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(db_default=Now())
    created_by = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(role__in=[r.label for r in Role]), name="servicetoken_role_valid"
            ),
            models.CheckConstraint(
                condition=Q(digest__regex=r"^[0-9a-f]{64}$"), name="servicetoken_digest_hex"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"


class Invitation(models.Model):
    """A one-time link that makes whoever opens it a member of `tenant` with `role`.

    Only the SHA-256 digest of the link's secret is stored (tenants/tokens.py, the
    service tokens' rule); the link is shown once to the admin who made it. `email` or
    `username` is who the admin meant (a new account is offered that username and gets
    that email); the link itself is the credential, and the audit records who used it.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(blank=True)
    username = models.CharField(max_length=150, blank=True)
    role = models.CharField(max_length=16, choices=ROLE_CHOICES)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(db_default=Now())
    created_by = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(role__in=[r.label for r in Role]), name="invitation_role_valid"
            ),
            models.CheckConstraint(
                condition=Q(digest__regex=r"^[0-9a-f]{64}$"), name="invitation_digest_hex"
            ),
            # Someone must be named: the admin's list says whom a pending link is for.
            models.CheckConstraint(
                condition=~Q(email="", username=""), name="invitation_names_someone"
            ),
        ]

    def __str__(self) -> str:
        return f"invitation {self.pk} to {self.tenant_id} for {self.invitee}"

    @property
    def invitee(self) -> str:
        return self.email or self.username

    def state(self, now: datetime) -> str:
        """pending, accepted, revoked or expired: the one rule for whether the link works."""
        if self.accepted_at is not None:
            return "accepted"
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= now:
            return "expired"
        return "pending"


class AuditEvent(models.Model):
    """Append-only: a database trigger rejects UPDATE and DELETE (see its migration)."""

    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    at = models.DateTimeField(db_default=Now(), db_index=True)
    actor_kind = models.CharField(max_length=16)  # user | token | system | anonymous
    actor_id = models.CharField(max_length=64, blank=True)
    actor_label = models.CharField(max_length=200, blank=True)
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64, blank=True)
    object_id = models.CharField(max_length=64, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    outcome = models.CharField(max_length=16, default="ok")  # ok | denied

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "-at"], name="audit_tenant_at"),
            models.Index(fields=["object_type", "object_id"], name="audit_object"),
        ]

    def __str__(self) -> str:
        return f"{self.at} {self.actor_label} {self.action} {self.object_type}:{self.object_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("audit events are append-only")
        super().save(*args, **kwargs)
