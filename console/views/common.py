"""Helpers the console's page groups share."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.http import url_has_allowed_host_and_scheme

from dispatch import selectors
from dispatch.exceptions import NotFound
from dispatch.models import Schedule
from tenants.roles import Principal


def is_htmx(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False))


def schedule_or_404(principal: Principal, schedule_id: uuid.UUID | str) -> Schedule:
    try:
        return selectors.schedule_get(tenant=principal.tenant, schedule_id=schedule_id)
    except NotFound:
        raise Http404("schedule not found") from None


def next_url(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


def done(request: HttpRequest, url: str, message: str) -> HttpResponse:
    """Back to `url` after a change, saying what was done once: a message in the
    session (django.contrib.messages, shown by templates/console/_messages.html),
    not in the address, where a reload or a shared link would say it again."""
    messages.success(request, message)
    return HttpResponseRedirect(url)
