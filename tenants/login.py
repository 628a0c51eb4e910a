"""Log-in forms of the console and the Django admin, with brute-force limits.

Every attempt is counted, before the password is checked, against its username
and its client address (tenants/limits.py: atomic counters in Redis, shared by
the console and the admin); a successful one is given back. An attempt whose
username or address is over its limit is refused with an inline message, even
with the right password, and its password is not checked. The message is the
same for known and unknown usernames and does not say which limit was hit.
Failures are audited, and the moment a limit is crossed.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import authenticate
from django.contrib.auth.forms import AuthenticationForm

from tenants import limits, services

USER_SCOPE = "login-user"
ADDRESS_SCOPE = "login-addr"


def _minutes(seconds: int) -> str:
    minutes = max(1, -(-seconds // 60))
    return "1 minute" if minutes == 1 else f"{minutes} minutes"


class ThrottledLoginMixin:
    """For AuthenticationForm subclasses: the limits around Django's own clean()."""

    surface = "console"
    request: Any
    cleaned_data: dict[str, Any]
    user_cache: Any
    throttled: str = ""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is None or not password:
            return self.cleaned_data
        address = limits.client_address(self.request)
        # Usernames are case-insensitive here so "Alice" and "alice" share a budget.
        user_key = str(username).strip().lower()
        per_user = limits.parse_rate(str(settings.LOGIN_FAILURES_PER_USER))
        per_addr = limits.parse_rate(str(settings.LOGIN_FAILURES_PER_ADDRESS))
        by_user = limits.hit(USER_SCOPE, user_key, per_user)
        by_addr = limits.hit(ADDRESS_SCOPE, address, per_addr)
        if by_user.over or by_addr.over:
            if by_user.count == by_user.limit + 1 or by_addr.count == by_addr.limit + 1:
                services.auth_failure_record(
                    action="auth.login_throttled",
                    address=address,
                    surface=self.surface,
                    subject=user_key,
                    object_type="user",
                )
            wait = max(h.retry_after_s for h in (by_user, by_addr) if h.over)
            self.throttled = f"Too many failed log-in attempts. Try again in {_minutes(wait)}."
            raise forms.ValidationError(self.throttled, code="throttled")
        self.user_cache = authenticate(self.request, username=username, password=password)
        if self.user_cache is None:
            services.auth_failure_record(
                action="auth.login_failed",
                address=address,
                surface=self.surface,
                subject=user_key,
                object_type="user",
            )
            raise self.get_invalid_login_error()  # type: ignore[attr-defined]
        # Only failures use up the budget.
        limits.hit(USER_SCOPE, user_key, per_user, amount=-1)
        limits.hit(ADDRESS_SCOPE, address, per_addr, amount=-1)
        self.confirm_login_allowed(self.user_cache)  # type: ignore[attr-defined]
        return self.cleaned_data


class ConsoleLoginForm(ThrottledLoginMixin, AuthenticationForm):
    surface = "console"


class AdminLoginForm(ThrottledLoginMixin, AdminAuthenticationForm):
    surface = "admin"
