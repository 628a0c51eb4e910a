"""Access pages: the session's tenant and time zone, service tokens and members."""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from console import forms as console_forms
from console.access import (
    SESSION_TENANT,
    SESSION_THEME,
    SESSION_TZ,
    base_context,
    tenant_view,
    viewer_zone,
)
from console.views.common import next_url
from dispatch import services
from dispatch.timing import cron
from tenants import selectors as tenant_selectors
from tenants import services as tenant_services
from tenants.exceptions import TenantsError
from tenants.roles import Principal, Role


@require_POST
def tenant_switch(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect(settings.LOGIN_URL)
    slug = request.POST.get("tenant", "")
    principal = tenant_selectors.user_principal(user=request.user, tenant_slug=slug)
    if principal is None or principal.tenant.slug != slug:
        raise Http404("no such tenant")
    request.session[SESSION_TENANT] = slug
    # Back where the switch was offered (the runs page's link from the operators' page).
    return redirect(next_url(request, reverse("console-home")))


# The footer's "Show times in" shows its own error (templates/base.html).
TZ_ERROR_TAG = "tz-pref"


@require_POST
def set_timezone(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect(settings.LOGIN_URL)
    name = request.POST.get("tz", "").strip()
    if not name:
        request.session.pop(SESSION_TZ, None)
    else:
        try:
            cron.get_zone(name)
        except cron.CronError:
            # Back to the page it was set from, which says so beside the field (base.html).
            shown = name if len(name) <= 64 else name[:64] + "…"
            messages.error(
                request,
                f"“{shown}” is not a time zone: use an IANA name such as Europe/Amsterdam "
                "or UTC (or leave it empty for your browser's zone).",
                extra_tags=TZ_ERROR_TAG,
            )
            return redirect(next_url(request, reverse("console-home")))
        request.session[SESSION_TZ] = name
    return redirect(next_url(request, reverse("console-home")))


# The colour theme: "auto" follows the system's (prefers-color-scheme), the others
# pin one; base.html puts it on <html data-theme> so the first paint is right.
THEMES = ("auto", "light", "dark")


@require_POST
def set_theme(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect(settings.LOGIN_URL)
    theme = request.POST.get("theme", "")
    if theme not in THEMES:
        return HttpResponse(
            f"theme must be one of {', '.join(THEMES)}", status=400, content_type="text/plain"
        )
    request.session[SESSION_THEME] = theme
    return redirect(next_url(request, reverse("console-home")))


# A new token's secret (and a new invitation's link) is shown once, on the GET after
# the POST (so a reload cannot create a second one). It is never kept in clear on the
# server: the session (a database row) holds it XOR a one-time pad, the pad rides in a
# short-lived HttpOnly cookie for that page only, and both go on first display.
NEW_TOKEN_TTL_S = 300


@dataclass(frozen=True)
class ShownOnce:
    """Where a secret waits for its one display: session key, pad cookie, the page's URL name."""

    session_key: str
    cookie: str
    url_name: str


NEW_TOKEN = ShownOnce("console_new_token", "console_new_token_pad", "console-tokens")
NEW_INVITATION = ShownOnce("console_new_invite", "console_new_invite_pad", "console-members")


def _xor(data: bytes, pad: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, pad, strict=True))


def _keep_new_secret(
    request: HttpRequest, response: HttpResponse, slot: ShownOnce, obj: Any, label: str, raw: str
) -> None:
    secret = raw.encode()
    pad = secrets.token_bytes(len(secret))
    request.session[slot.session_key] = {
        "id": obj.pk,
        "name": label,
        "masked": base64.b64encode(_xor(secret, pad)).decode(),
    }
    response.set_cookie(
        slot.cookie,
        base64.urlsafe_b64encode(pad).decode(),
        max_age=NEW_TOKEN_TTL_S,
        path=reverse(slot.url_name),
        secure=request.is_secure(),
        httponly=True,
        samesite="Strict",
    )


def _pop_new_secret(request: HttpRequest, slot: ShownOnce) -> tuple[str, str]:
    """(label, secret) of the object created just before, once; else ("", "")."""
    kept = request.session.pop(slot.session_key, None)
    pad = request.COOKIES.get(slot.cookie, "")
    if not kept or not pad:
        return "", ""
    try:
        masked = base64.b64decode(kept["masked"])
        return str(kept["name"]), _xor(masked, base64.urlsafe_b64decode(pad)).decode()
    except (ValueError, KeyError, TypeError):
        return "", ""


def _shown_once(request: HttpRequest, response: HttpResponse, slot: ShownOnce) -> HttpResponse:
    # The secret is shown once: keep it out of caches and the back button.
    response["Cache-Control"] = "no-store"
    if slot.cookie in request.COOKIES:
        response.delete_cookie(slot.cookie, path=reverse(slot.url_name))
    return response


@require_http_methods(["GET", "POST"])
@tenant_view(Role.ADMIN)
def tokens(request: HttpRequest, principal: Principal) -> HttpResponse:
    form = console_forms.TokenForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            raw = form.cleaned_data.get("expires_at") or ""
            try:
                expires = console_forms.parse_local(raw, viewer_zone(request)) if raw else None
                created, secret = tenant_services.token_issue(
                    tenant=principal.tenant,
                    name=form.cleaned_data["name"],
                    role=Role.parse(form.cleaned_data["role"]),
                    expires_at=expires,
                    actor=principal,
                )
            except ValueError as exc:
                form.add_error("expires_at", f"expires_at: is not a date and time in range ({exc})")
            except TenantsError as exc:
                for key, messages in exc.detail.items():
                    for m in messages:
                        form.add_error(key if key in form.fields else None, f"{key}: {m}")
            else:
                # POST-redirect-GET: reloading the page shows it, never makes another token.
                done = redirect("console-tokens")
                _keep_new_secret(request, done, NEW_TOKEN, created, created.name, secret)
                return done
        status = 400
    created_name, secret = (
        ("", "") if request.method == "POST" else _pop_new_secret(request, NEW_TOKEN)
    )
    ctx = base_context(
        request,
        principal,
        form=form,
        secret=secret,
        created_name=created_name,
        tokens=list(tenant_selectors.token_list(tenant=principal.tenant)),
        now=services.db_now(),
    )
    return _shown_once(
        request, render(request, "console/tokens.html", ctx, status=status), NEW_TOKEN
    )


@require_http_methods(["GET", "POST"])
@tenant_view(Role.ADMIN)
def token_revoke(request: HttpRequest, principal: Principal, token_id: int) -> HttpResponse:
    """GET asks to confirm (works without JavaScript); POST revokes."""
    token = tenant_selectors.token_get(tenant=principal.tenant, token_id=token_id)
    if token is None:
        raise Http404("token not found")
    if request.method == "GET":
        return render(
            request, "console/token_revoke.html", base_context(request, principal, token=token)
        )
    try:
        tenant_services.token_revoke(tenant=principal.tenant, token_id=token_id, actor=principal)
    except TenantsError:
        raise Http404("token not found") from None
    return redirect("console-tokens")


def _members_page(
    request: HttpRequest,
    principal: Principal,
    *,
    form: console_forms.MemberAddForm | None = None,
    invite_form: console_forms.InviteForm | None = None,
    status: int = 200,
) -> HttpResponse:
    invited, link = ("", "")
    if request.method == "GET":
        invited, secret = _pop_new_secret(request, NEW_INVITATION)
        if secret:
            link = request.build_absolute_uri(reverse("invite-accept", args=[secret]))
    now = timezone.now()  # the clock invitation_lookup judges expiry by
    ctx = base_context(
        request,
        principal,
        form=form or console_forms.MemberAddForm(),
        invite_form=invite_form or console_forms.InviteForm(),
        memberships=tenant_selectors.membership_list(tenant=principal.tenant),
        invitations=[
            (i, i.state(now)) for i in tenant_selectors.invitation_list(tenant=principal.tenant)
        ],
        invited=invited,
        invite_link=link,
        invite_ttl_days=settings.INVITATION_TTL_DAYS,
        roles=[r.label for r in Role],
    )
    response = render(request, "console/members.html", ctx, status=status)
    return _shown_once(request, response, NEW_INVITATION)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.ADMIN)
def members(request: HttpRequest, principal: Principal) -> HttpResponse:
    form = console_forms.MemberAddForm(request.POST or None)
    if request.method == "POST":
        if form.is_valid():
            # Only platform staff add accounts (tenants/services.py); one answer otherwise.
            try:
                tenant_services.membership_attach(
                    tenant=principal.tenant,
                    username=form.cleaned_data["username"],
                    role=Role.parse(form.cleaned_data["role"]),
                    actor=principal,
                    by_staff=request.user.is_staff,
                )
            except TenantsError as exc:
                form.add_error("username", f"username: {exc.message}")
            else:
                return redirect("console-members")
        return _members_page(request, principal, form=form, status=400)
    return _members_page(request, principal)


@require_POST
@tenant_view(Role.ADMIN)
def invite(request: HttpRequest, principal: Principal) -> HttpResponse:
    """A one-time link for someone to join; the link is shown once, on the members page."""
    form = console_forms.InviteForm(request.POST)
    if form.is_valid():
        try:
            invitation, secret = tenant_services.invitation_create(
                tenant=principal.tenant,
                invitee=form.cleaned_data["invitee"],
                role=Role.parse(form.cleaned_data["role"]),
                actor=principal,
            )
        except TenantsError as exc:
            for key, problems in exc.detail.items():
                for m in problems:
                    form.add_error("invitee" if key == "invitee" else None, f"{key}: {m}")
        else:
            # POST-redirect-GET, as for tokens: a reload shows the link, never makes another.
            done = redirect("console-members")
            _keep_new_secret(request, done, NEW_INVITATION, invitation, invitation.invitee, secret)
            return done
    return _members_page(request, principal, invite_form=form, status=400)


@require_http_methods(["GET", "POST"])
@tenant_view(Role.ADMIN)
def invite_revoke(request: HttpRequest, principal: Principal, invitation_id: int) -> HttpResponse:
    """GET asks to confirm (works without JavaScript); POST revokes the link."""
    invitation = tenant_selectors.invitation_get(
        tenant=principal.tenant, invitation_id=invitation_id
    )
    if invitation is None or invitation.accepted_at is not None:
        raise Http404("invitation not found")
    if request.method == "GET":
        ctx = base_context(request, principal, invitation=invitation)
        return render(request, "console/invite_revoke.html", ctx)
    try:
        tenant_services.invitation_revoke(
            tenant=principal.tenant, invitation_id=invitation_id, actor=principal
        )
    except TenantsError:
        raise Http404("invitation not found") from None
    return redirect("console-members")


def _member_or_404(principal: Principal, user_id: int) -> User:
    membership = tenant_selectors.membership_get(tenant=principal.tenant, user_id=user_id)
    if membership is None:
        raise Http404("member not found")
    return membership.user


@require_POST
@tenant_view(Role.ADMIN)
def member_role(request: HttpRequest, principal: Principal, user_id: int) -> HttpResponse:
    user = _member_or_404(principal, user_id)
    form = console_forms.MemberRoleForm(request.POST)
    if not form.is_valid():
        return HttpResponse("role: must be viewer, operator or admin", status=400)
    if str(user.pk) == principal.actor_id:
        return HttpResponse("you cannot change your own role", status=400)
    tenant_services.membership_set(
        tenant=principal.tenant,
        user=user,
        role=Role.parse(form.cleaned_data["role"]),
        actor=principal,
    )
    return redirect("console-members")


@require_http_methods(["GET", "POST"])
@tenant_view(Role.ADMIN)
def member_remove(request: HttpRequest, principal: Principal, user_id: int) -> HttpResponse:
    """GET asks to confirm (works without JavaScript); POST removes."""
    user = _member_or_404(principal, user_id)
    if str(user.pk) == principal.actor_id:
        return HttpResponse("you cannot remove yourself", status=400)
    if request.method == "GET":
        ctx = base_context(request, principal, member=user)
        return render(request, "console/member_remove.html", ctx)
    tenant_services.membership_set(tenant=principal.tenant, user=user, role=None, actor=principal)
    return redirect("console-members")
