"""The page an invitation link opens (no log-in needed): a new account, or the signed-in
one, joins the invitation's tenant with its role. The link works once; a spent one
(used, withdrawn, expired) is a 410 saying so, an unknown one a 404.

Every POST counts against the client address (INVITE_ATTEMPTS_PER_ADDRESS, the
log-in throttle's counters in tenants/limits.py): each may create an account and
hash a password, so the page is not an open door for either.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from console import forms as console_forms
from console.access import SESSION_TENANT, base_context, principal_for
from tenants import limits
from tenants import selectors as tenant_selectors
from tenants import services as tenant_services
from tenants.exceptions import Gone, InvalidInput, NotFound
from tenants.models import Invitation

ADDRESS_SCOPE = "invite-addr"
NOT_FOUND = (
    "This invitation link is not known. Check that it was copied whole, or ask the "
    "tenant's admin for a new one."
)


def _page(request: HttpRequest, template: str, status: int, **extra: object) -> HttpResponse:
    principal = principal_for(request) if request.user.is_authenticated else None
    response = render(request, template, base_context(request, principal, **extra), status=status)
    # The link's secret is in this page's address: no cache keeps it.
    response["Cache-Control"] = "no-store"
    return response


def _gone(request: HttpRequest, status: int, message: str) -> HttpResponse:
    return _page(request, "console/invite_gone.html", status, message=message)


def _throttled(request: HttpRequest) -> HttpResponse | None:
    address = limits.client_address(request)
    hit = limits.hit(
        ADDRESS_SCOPE, address, limits.parse_rate(str(settings.INVITE_ATTEMPTS_PER_ADDRESS))
    )
    if not hit.over:
        return None
    if hit.count == hit.limit + 1:
        tenant_services.auth_failure_record(
            action="auth.invite_throttled", address=address, surface="console"
        )
    minutes = max(1, -(-hit.retry_after_s // 60))
    response = _gone(
        request,
        429,
        f"Too many attempts from your address. Try again in {minutes} minute"
        f"{'' if minutes == 1 else 's'}.",
    )
    response["Retry-After"] = str(hit.retry_after_s)
    return response


def _joined(request: HttpRequest, invitation: Invitation) -> HttpResponse:
    request.session[SESSION_TENANT] = invitation.tenant.slug
    return redirect("console-home")


@require_http_methods(["GET", "POST"])
def invite_accept(request: HttpRequest, token: str) -> HttpResponse:
    if request.method == "POST":
        throttled = _throttled(request)
        if throttled is not None:
            return throttled
    try:
        invitation = tenant_selectors.invitation_lookup(raw=token)
    except NotFound:
        return _gone(request, 404, NOT_FOUND)
    except Gone as exc:
        return _gone(request, 410, f"{exc.message} Ask the tenant's admin for a new one.")
    if request.user.is_authenticated:
        return _accept_signed_in(request, token, invitation)
    return _accept_new(request, token, invitation)


def _accept_signed_in(request: HttpRequest, token: str, invitation: Invitation) -> HttpResponse:
    assert isinstance(request.user, User)  # noqa: S101 - authenticated
    refusal = tenant_selectors.invitation_refusal(invitation=invitation, user=request.user)
    if request.method == "POST" and not refusal:
        try:
            tenant_services.invitation_accept(raw=token, user=request.user)
        except NotFound:
            return _gone(request, 404, NOT_FOUND)
        except Gone as exc:
            return _gone(request, 410, exc.message)
        except InvalidInput as exc:
            refusal = exc.message  # joined or made staff since the page was read
        else:
            return _joined(request, invitation)
    status = 400 if request.method == "POST" else 200
    return _page(
        request, "console/invite_accept.html", status, invitation=invitation, refusal=refusal
    )


def _accept_new(request: HttpRequest, token: str, invitation: Invitation) -> HttpResponse:
    # The invitation's email takes part in the password validators' similarity check.
    form = console_forms.InviteAcceptForm(
        request.POST or None,
        instance=User(email=invitation.email),
        initial={"username": invitation.username},
    )
    if request.method == "POST" and form.is_valid():
        try:
            user = tenant_services.invitation_accept_new(
                raw=token,
                username=form.cleaned_data["username"],
                password=form.cleaned_data["password1"],
            )
        except NotFound:
            return _gone(request, 404, NOT_FOUND)
        except Gone as exc:
            return _gone(request, 410, exc.message)
        except InvalidInput as exc:
            for m in exc.detail.get("username", [exc.message]):
                form.add_error("username", m)
        else:
            login(request, user)
            return _joined(request, invitation)
    status = 400 if request.method == "POST" else 200
    return _page(request, "console/invite_accept.html", status, invitation=invitation, form=form)
