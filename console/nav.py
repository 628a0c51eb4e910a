"""The console's navigation: its groups, their pages, and which one a path belongs to.

One list, read by the sidebar (base.html through the `nav` tag) and by the browser
tests that visit every page: a page added here is in the menu and in those tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse


@dataclass(frozen=True)
class Item:
    label: str
    url_name: str
    icon: str
    # Paths under these prefixes belong to this item (its active state); the item's
    # own URL always does.
    prefixes: tuple[str, ...] = ()
    needs: str = ""  # "" everyone with a tenant, "admin" tenant admins, "staff" platform staff


@dataclass(frozen=True)
class Group:
    label: str
    items: tuple[Item, ...]


NAV: tuple[Group, ...] = (
    Group(
        "Operate",
        (
            Item("Dashboard", "console-home", "dashboard", ("/upcoming", "/dashboard/")),
            Item("Schedules", "console-schedules", "schedules", ("/schedules/", "/backfills/")),
            Item("Runs", "console-runs", "runs", ("/runs/", "/executions/", "/operations/")),
            Item("Why did it (not) run?", "console-explain", "explain", ("/explain",)),
        ),
    ),
    Group(
        "Configure",
        (
            Item("Calendars", "console-calendars", "calendars", ("/calendars/",)),
            Item("Alerts", "console-alerts", "alerts", ("/alerts/",)),
        ),
    ),
    Group(
        "Tenant",
        (
            Item("Tokens", "console-tokens", "tokens", ("/tokens/",), needs="admin"),
            Item("Members", "console-members", "members", ("/members/",), needs="admin"),
        ),
    ),
    Group(
        "Platform",
        (
            Item("Operators", "console-ops", "operators", (), needs="staff"),
            Item("Commands", "console-ops-commands", "commands", (), needs="staff"),
            Item("Audit", "console-ops-audit", "audit", ("/ops/audit",), needs="staff"),
        ),
    ),
)


def allowed(item: Item, *, can_admin: bool, is_staff: bool) -> bool:
    return (
        not item.needs
        or (item.needs == "admin" and can_admin)
        or (item.needs == "staff" and is_staff)
    )


def current(path: str) -> Item | None:
    """The item a path belongs to: the longest matching prefix, or the item's own URL."""
    best: tuple[int, Item | None] = (0, None)
    for group in NAV:
        for item in group.items:
            url = reverse(item.url_name)
            for prefix in (url, *item.prefixes):
                exact = prefix == "/"
                hit = path == prefix if exact else path.startswith(prefix)
                if hit and len(prefix) > best[0]:
                    best = (len(prefix), item)
    return best[1]


def menu(path: str, *, can_admin: bool, is_staff: bool) -> list[dict[str, object]]:
    """The groups the viewer may see, each item with its URL and whether it is current."""
    here = current(path)
    groups: list[dict[str, object]] = []
    for group in NAV:
        items = [
            {"label": i.label, "url": reverse(i.url_name), "icon": i.icon, "current": i == here}
            for i in group.items
            if allowed(i, can_admin=can_admin, is_staff=is_staff)
        ]
        if items:
            groups.append({"label": group.label, "items": items})
    return groups
