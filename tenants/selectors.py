"""Reads of the tenants app."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import AnonymousUser, User
from django.db import DatabaseError, connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from core.db import Unavailable, forget_connection, unavailable_reason
from tenants import tokens
from tenants.exceptions import Gone, NotFound
from tenants.models import AuditEvent, Invitation, Membership, ServiceToken, Tenant
from tenants.roles import Principal, Role

LAST_USED_RESOLUTION = timedelta(seconds=60)


def token_authenticate(*, raw: str) -> Principal | None:
    """The principal for a raw bearer token, or None if unknown, revoked, expired or its tenant inactive."""
    if not tokens.looks_like_token(raw):
        return None
    now = timezone.now()
    token = (
        ServiceToken.objects.select_related("tenant")
        .filter(digest=tokens.digest(raw), revoked_at__isnull=True, tenant__active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if token is None:
        return None
    # Recording last use on every request would make each API call a write;
    # once a minute is precise enough to spot unused tokens. The row just read says
    # whether it is due: most requests send no UPDATE at all (a round trip each).
    stale = now - LAST_USED_RESOLUTION
    if token.last_used_at is None or token.last_used_at < stale:
        try:
            ServiceToken.objects.filter(pk=token.pk).filter(
                Q(last_used_at__isnull=True) | Q(last_used_at__lt=stale)
            ).update(last_used_at=now)
        except DatabaseError as exc:
            # A read-only server (a standby, a primary being demoted in a fail-over)
            # still answers reads: bookkeeping must not turn them into 503s. In
            # autocommit the refused UPDATE aborted nothing else; inside a transaction
            # it did, so that is raised. The connection is dropped once the request
            # ends, so the next one looks for the primary again.
            if connection.in_atomic_block or unavailable_reason(exc) is not Unavailable.READ_ONLY:
                raise
            forget_connection(at_request_end=True)
    return Principal(
        tenant=token.tenant,
        role=Role.parse(token.role),
        actor_kind="token",
        actor_id=str(token.pk),
        label=f"token:{token.prefix} ({token.name})",
    )


def user_principal(*, user: User | AnonymousUser, tenant_slug: str | None) -> Principal | None:
    """The principal of a console user in a tenant (platform staff act as admin everywhere)."""
    if not user.is_authenticated:
        return None
    tenants = tenants_for_user(user=user)
    tenant = tenants.filter(slug=tenant_slug).first() if tenant_slug else tenants.first()
    if tenant is None:
        return None
    if user.is_staff:
        role = Role.ADMIN
    else:
        membership = Membership.objects.get(user=user, tenant=tenant)
        role = Role.parse(membership.role)
    return Principal(
        tenant=tenant,
        role=role,
        actor_kind="user",
        actor_id=str(user.pk),
        label=f"user:{user.get_username()}",
    )


def tenants_for_user(*, user: User | AnonymousUser) -> QuerySet[Tenant]:
    if not user.is_authenticated:
        return Tenant.objects.none()
    if user.is_staff:
        return Tenant.objects.filter(active=True)
    return Tenant.objects.filter(active=True, memberships__user=user).distinct()


def token_list(*, tenant: Tenant) -> QuerySet[ServiceToken]:
    return ServiceToken.objects.filter(tenant=tenant)


def token_get(*, tenant: Tenant, token_id: int) -> ServiceToken | None:
    return ServiceToken.objects.filter(tenant=tenant, pk=token_id).first()


def user_by_username(*, username: str) -> User | None:
    return User.objects.filter(username=username, is_active=True).first()


def membership_list(*, tenant: Tenant) -> list[Membership]:
    return list(
        Membership.objects.select_related("user").filter(tenant=tenant).order_by("user__username")
    )


def membership_get(*, tenant: Tenant, user_id: int) -> Membership | None:
    return Membership.objects.select_related("user").filter(tenant=tenant, user_id=user_id).first()


INVITATION_GONE = {
    "accepted": "This invitation has already been used.",
    "revoked": "This invitation was withdrawn by the tenant's admin.",
    "expired": "This invitation has expired.",
    "inactive": "The tenant this invitation is for is no longer active.",
}


def invitation_lookup(*, raw: str, lock: bool = False) -> Invitation:
    """The invitation of a link's secret if it still works (with `lock`, locked for the
    caller's transaction); NotFound if there is none, Gone (saying why) if it is spent."""
    if not tokens.looks_like_invitation(raw):
        raise NotFound("invitation not found")
    qs = Invitation.objects.select_related("tenant").filter(digest=tokens.digest(raw))
    if lock:
        qs = qs.select_for_update(of=("self",))
    invitation = qs.first()
    if invitation is None:
        raise NotFound("invitation not found")
    state = invitation.state(timezone.now())
    if state == "pending" and not invitation.tenant.active:
        state = "inactive"
    if state != "pending":
        raise Gone(INVITATION_GONE[state], detail={"invitation": [state]})
    return invitation


def invitation_refusal(*, invitation: Invitation, user: User) -> str:
    """Why this signed-in account cannot accept (empty when it can): the one rule the
    page (to offer the button or not) and the acceptance share."""
    if user.is_staff:
        return (
            "Platform staff already act as admin in every tenant: this invitation is for "
            "someone else. Sign out to accept it with another account."
        )
    if Membership.objects.filter(tenant_id=invitation.tenant_id, user=user).exists():
        return (
            f"You are already a member of {invitation.tenant.slug}; an admin there changes "
            "roles on the members page."
        )
    return ""


def invitation_list(*, tenant: Tenant) -> list[Invitation]:
    """The tenant's invitations not yet used nor revoked (expired ones too, to clear away)."""
    return list(
        Invitation.objects.filter(tenant=tenant, accepted_at__isnull=True, revoked_at__isnull=True)
    )


def invitation_get(*, tenant: Tenant, invitation_id: int) -> Invitation | None:
    return Invitation.objects.filter(tenant=tenant, pk=invitation_id).first()


def audit_search(
    *,
    actor: str = "",
    tenant_slug: str = "",
    action: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 200,
) -> list[AuditEvent]:
    """The audit log for platform operators, newest first, filtered by actor/tenant/action/time."""
    qs = AuditEvent.objects.select_related("tenant")
    if actor:
        qs = qs.filter(actor_label__icontains=actor)
    if tenant_slug:
        qs = qs.filter(tenant__slug=tenant_slug)
    if action:
        qs = qs.filter(action__startswith=action)
    if since is not None:
        qs = qs.filter(at__gte=since)
    if until is not None:
        qs = qs.filter(at__lt=until)
    return list(qs.order_by("-at", "-id")[:limit])
