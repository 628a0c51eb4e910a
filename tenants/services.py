"""Writes of the tenants app. Each is one transaction with its audit row inside."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Value
from django.db.models.functions import Replace, Upper
from django.utils import timezone
from django.utils.text import slugify

from tenants import naming, tokens
from tenants.audit import audit_record
from tenants.exceptions import InvalidInput, NotFound
from tenants.models import Invitation, Membership, ServiceToken, Tenant, TenantQuota
from tenants.roles import Principal, Role
from tenants.selectors import invitation_lookup, invitation_refusal, user_by_username


def audit_denied(*, actor: Principal, method: str | None, path: str, needed: Role) -> None:
    """Record a request the actor's role did not allow (console and API alike)."""
    audit_record(
        actor=actor,
        action=f"denied.{(method or '').lower()}",
        object_type="route",
        object_id=path[:64],
        after={"needed": needed.label, "had": actor.role.label},
        outcome="denied",
    )


def _token_view(token: ServiceToken) -> dict[str, object]:
    return {
        "name": token.name,
        "role": token.role,
        "prefix": token.prefix,
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
        "revoked": token.revoked_at is not None,
    }


@transaction.atomic
def tenant_create(*, slug: str, name: str = "", actor: Principal | None = None) -> Tenant:
    if slugify(slug) != slug or not slug:
        raise InvalidInput(
            f"slug {slug!r} must be lower-case letters, digits and hyphens",
            detail={"slug": ["must be lower-case letters, digits and hyphens"]},
        )
    problem = naming.slug_problem(slug)
    if problem:
        raise InvalidInput(f"slug {slug!r} {problem}", detail={"slug": [problem]})
    if Tenant.objects.filter(slug=slug).exists():
        raise InvalidInput(f"tenant {slug!r} already exists", detail={"slug": ["already exists"]})
    key = naming.slug_env_key(slug)
    # Same expression as the model's unique constraint (the backstop under a race).
    twin = (
        Tenant.objects.annotate(env_key=Upper(Replace("slug", Value("-"), Value("_"))))
        .filter(env_key=key)
        .values_list("slug", flat=True)
        .first()
    )
    if twin is not None:
        message = (
            f"is too close to tenant {twin!r}: both would read the secret variables "
            f"{naming.ENV_PREFIX}{key}{naming.ENV_SEPARATOR}*"
        )
        raise InvalidInput(f"slug {slug!r} {message}", detail={"slug": [message]})
    found = naming.invisible_char(name)
    if found:
        message = f"must not contain bidi controls or invisible characters (found {found})"
        raise InvalidInput(f"tenant name {message}", detail={"name": [message]})
    tenant = Tenant.objects.create(slug=slug, name=name or slug)
    TenantQuota.objects.create(tenant=tenant)
    audit_record(
        actor=actor,
        tenant=tenant,
        action="tenant.create",
        object_type="tenant",
        object_id=str(tenant.pk),
        after={"slug": slug, "name": tenant.name},
    )
    return tenant


@transaction.atomic
def token_issue(
    *,
    tenant: Tenant,
    name: str,
    role: Role,
    expires_at: datetime | None = None,
    actor: Principal | None = None,
) -> tuple[ServiceToken, str]:
    """Create a token; returns it and the raw secret, which is never retrievable again."""
    name = name.strip()
    if not name:
        raise InvalidInput("token name is required", detail={"name": ["is required"]})
    found = naming.invisible_char(name)
    if found:
        message = f"must not contain bidi controls or invisible characters (found {found})"
        raise InvalidInput(f"token name {message}", detail={"name": [message]})
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidInput(
            "expiry must be in the future", detail={"expires_at": ["must be in the future"]}
        )
    new = tokens.generate()
    token = ServiceToken.objects.create(
        tenant=tenant,
        name=name[:100],
        role=role.label,
        prefix=new.prefix,
        digest=new.digest,
        expires_at=expires_at,
        created_by=actor.label if actor else "system",
    )
    audit_record(
        actor=actor,
        tenant=tenant,
        action="token.create",
        object_type="token",
        object_id=str(token.pk),
        after=_token_view(token),
    )
    return token, new.raw


@transaction.atomic
def token_revoke(*, tenant: Tenant, token_id: int, actor: Principal | None) -> ServiceToken:
    token = ServiceToken.objects.select_for_update().filter(tenant=tenant, pk=token_id).first()
    if token is None:
        raise NotFound("token not found")
    before = _token_view(token)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    audit_record(
        actor=actor,
        tenant=tenant,
        action="token.revoke",
        object_type="token",
        object_id=str(token.pk),
        before=before,
        after=_token_view(token),
    )
    return token


@transaction.atomic
def membership_set(
    *, tenant: Tenant, user: User, role: Role | None, actor: Principal | None
) -> Membership | None:
    """Grant, change or (role=None) remove a user's role in a tenant."""
    current = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
    before = {"user": user.get_username(), "role": current.role} if current else None
    if role is None:
        if current is not None:
            current.delete()
        result = None
        action = "member.remove"
    elif current is None:
        result = Membership.objects.create(tenant=tenant, user=user, role=role.label)
        action = "member.add"
    else:
        current.role = role.label
        current.save(update_fields=["role"])
        result = current
        action = "member.role_change"
    audit_record(
        actor=actor,
        tenant=tenant,
        action=action,
        object_type="membership",
        object_id=str(user.pk),
        before=before,
        after={"user": user.get_username(), "role": role.label} if role else None,
    )
    return result


MEMBER_ADD_REFUSED = "no account that can be added by that name (platform staff add members)"


def membership_attach(
    *, tenant: Tenant, username: str, role: Role, actor: Principal, by_staff: bool
) -> Membership:
    """Add an existing account to a tenant: platform staff only.

    Accounts span tenants, so attaching one is a platform decision: a tenant
    admin could otherwise pull in another tenant's users or staff, and learn
    from the answers which usernames exist. Staff attach active, non-staff
    accounts (staff already act as admin everywhere); tenant admins change
    roles and remove members. Every refusal — unknown, inactive or staff
    account, or a caller who is not staff — gets the same answer, audited.
    """
    user = user_by_username(username=username) if by_staff else None
    if user is None or user.is_staff:
        audit_record(
            actor=actor,
            tenant=tenant,
            action="member.add",
            object_type="membership",
            after={"username": username[:150], "role": role.label},
            outcome="denied",
        )
        raise InvalidInput(MEMBER_ADD_REFUSED, detail={"username": [MEMBER_ADD_REFUSED]})
    membership = membership_set(tenant=tenant, user=user, role=role, actor=actor)
    assert membership is not None  # noqa: S101 - a role was given
    return membership


INVITEE_INVALID = (
    "must be an email address or a username (letters, digits and @ . + - _, at most 150)"
)


def _invitee(text: str) -> tuple[str, str]:
    """(email, username) the admin meant by `text`: an address if it is one, else a username."""
    if "@" in text:
        try:
            validate_email(text)
        except ValidationError:
            pass
        else:
            return text, ""
    try:
        UnicodeUsernameValidator()(text)
    except ValidationError:
        raise InvalidInput(
            f"invitee {INVITEE_INVALID}", detail={"invitee": [INVITEE_INVALID]}
        ) from None
    if len(text) > 150:
        raise InvalidInput(f"invitee {INVITEE_INVALID}", detail={"invitee": [INVITEE_INVALID]})
    return "", text


def _invitation_view(invitation: Invitation) -> dict[str, object]:
    return {
        "invitee": invitation.invitee,
        "role": invitation.role,
        "expires_at": invitation.expires_at.isoformat(),
    }


@transaction.atomic
def invitation_create(
    *, tenant: Tenant, invitee: str, role: Role, actor: Principal
) -> tuple[Invitation, str]:
    """A one-time link that makes its holder a member; returns it and the link's secret,
    which is never retrievable again (only its digest is stored).

    Nothing here says whether an account of that name exists: the person accepts
    themselves, so no account is attached without its owner (membership_attach's
    concern), and the admin learns nothing beyond the tenant's own member list.
    """
    text = invitee.strip()
    if not text:
        raise InvalidInput("invitee is required", detail={"invitee": ["is required"]})
    found = naming.invisible_char(text)
    if found:
        message = f"must not contain bidi controls or invisible characters (found {found})"
        raise InvalidInput(f"invitee {message}", detail={"invitee": [message]})
    email, username = _invitee(text)
    if username and Membership.objects.filter(tenant=tenant, user__username=username).exists():
        message = f"{username} is already a member of {tenant.slug}"
        raise InvalidInput(f"invitee {message}", detail={"invitee": [message]})
    raw, digest = tokens.generate_invitation()
    invitation = Invitation.objects.create(
        tenant=tenant,
        email=email,
        username=username,
        role=role.label,
        digest=digest,
        created_by=actor.label,
        expires_at=timezone.now() + timedelta(days=int(settings.INVITATION_TTL_DAYS)),
    )
    audit_record(
        actor=actor,
        tenant=tenant,
        action="member.invite",
        object_type="invitation",
        object_id=str(invitation.pk),
        after=_invitation_view(invitation),
    )
    return invitation, raw


@transaction.atomic
def invitation_revoke(*, tenant: Tenant, invitation_id: int, actor: Principal) -> Invitation:
    invitation = (
        Invitation.objects.select_for_update().filter(tenant=tenant, pk=invitation_id).first()
    )
    if invitation is None:
        raise NotFound("invitation not found")
    if invitation.accepted_at is not None:
        message = "was already accepted: remove the member instead"
        raise InvalidInput(f"invitation {message}", detail={"invitation": [message]})
    if invitation.revoked_at is None:
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
    audit_record(
        actor=actor,
        tenant=tenant,
        action="member.invite_revoke",
        object_type="invitation",
        object_id=str(invitation.pk),
        after=_invitation_view(invitation),
    )
    return invitation


def _accept(invitation: Invitation, user: User, *, new_account: bool) -> Membership:
    role = Role.parse(invitation.role)
    actor = Principal(
        tenant=invitation.tenant,
        role=role,
        actor_kind="user",
        actor_id=str(user.pk),
        label=f"user:{user.get_username()}",
    )
    invitation.accepted_at = timezone.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    audit_record(
        actor=actor,
        action="member.invite_accept",
        object_type="invitation",
        object_id=str(invitation.pk),
        after=_invitation_view(invitation)
        | {"user": user.get_username(), "new_account": new_account},
    )
    membership = membership_set(tenant=invitation.tenant, user=user, role=role, actor=actor)
    assert membership is not None  # noqa: S101 - a role was given
    return membership


@transaction.atomic
def invitation_accept(*, raw: str, user: User) -> Membership:
    """A signed-in account joins the invitation's tenant with its role (once)."""
    invitation = invitation_lookup(raw=raw, lock=True)
    refusal = invitation_refusal(invitation=invitation, user=user)
    if refusal:
        raise InvalidInput(refusal, detail={"user": [refusal]})
    return _accept(invitation, user, new_account=False)


def invitation_accept_new(*, raw: str, username: str, password: str) -> User:
    """A new account (the caller has checked the password against the validators)
    that joins the invitation's tenant with its role (once)."""
    # Hashed before the row lock: it takes a noticeable fraction of a second.
    hashed = make_password(password)
    with transaction.atomic():
        invitation = invitation_lookup(raw=raw, lock=True)
        try:
            with transaction.atomic():
                user = User.objects.create(
                    username=username, email=invitation.email, password=hashed
                )
        except IntegrityError:
            message = "is taken: choose another, or sign in if it is yours"
            raise InvalidInput(f"username {message}", detail={"username": [message]}) from None
        _accept(invitation, user, new_account=True)
    return user


@transaction.atomic
def user_ensure(*, username: str, password: str, is_staff: bool = False) -> User:
    user_model = User
    user, _ = user_model.objects.get_or_create(username=username)
    user.set_password(password)
    user.is_staff = is_staff
    user.is_superuser = is_staff
    user.save()
    return user


@transaction.atomic
def signing_key_rotate(*, tenant: Tenant, actor: Principal | None) -> str:
    """A new HMAC key for the tenant's callbacks; the old one stops signing at once."""
    from tenants.models import new_signing_key

    Tenant.objects.select_for_update().filter(pk=tenant.pk).update(signing_key=new_signing_key())
    tenant.refresh_from_db(fields=["signing_key"])
    # The audit row records that it happened, never the key itself.
    audit_record(
        actor=actor,
        tenant=tenant,
        action="tenant.signing_key_rotate",
        object_type="tenant",
        object_id=str(tenant.pk),
    )
    return tenant.signing_key


@transaction.atomic
def auth_failure_record(
    *, action: str, address: str, surface: str, subject: str = "", object_type: str = ""
) -> None:
    """Audit a failed (or throttled) log-in or token authentication by an anonymous client.

    `subject` is what was tried (the username, or a token's visible prefix),
    never a secret; the client address is in the label, so operators can search by it.
    """
    audit_record(
        actor=None,
        actor_kind="anonymous",
        actor_label=f"anonymous@{address}"[:200],
        action=action,
        object_type=object_type,
        object_id=subject[:64],
        after={"address": address, "surface": surface},
        outcome="denied",
    )
