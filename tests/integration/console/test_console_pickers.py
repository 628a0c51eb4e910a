"""Schedule pickers past the first 500 names: the edit form keeps every
upstream (it is a text field of names, not a capped dropdown), the explainer
takes any schedule by name or id, and the search behind both is tenant-scoped
and bounded."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from dispatch import services
from dispatch.models import Schedule
from tests.support.console_support import TARGET, World, bulk_schedules

pytestmark = pytest.mark.django_db
MANY = 520  # past the old 500-name cap


@pytest.fixture
def world(world: World) -> World:
    """The shared world (tests/integration/conftest.py), and plenty of schedules
    whose names sort before the ones the tests use."""
    bulk_schedules(world.tenant, MANY, prefix="aaa")
    return world


class FormReader(HTMLParser):
    """The values a browser would submit for the form with `form_id`."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = False
        self.values: list[tuple[str, str]] = []
        self._select: str | None = None
        self._textarea: str | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside:
            return
        if tag == "input" and a.get("name") and a.get("type") not in ("submit", "button"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self.values.append((a["name"], a.get("value", "")))
        elif tag == "select":
            self._select = a.get("name")
        elif tag == "option" and self._select and "selected" in a:
            self.values.append((self._select, a.get("value", "")))
        elif tag == "textarea":
            self._textarea, self._text = a.get("name"), ""

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self._select = None
        elif tag == "textarea" and self._textarea:
            # A browser drops the one newline right after <textarea>.
            self.values.append((self._textarea, self._text.removeprefix("\n")))
            self._textarea = None


def submitted(html: str, form_id: str = "schedule-form") -> dict[str, list[str]]:
    reader = FormReader(form_id)
    reader.feed(html)
    out: dict[str, list[str]] = {}
    for name, value in reader.values:
        out.setdefault(name, []).append(value)
    return out


def downstream(world: World, upstream: Schedule) -> Schedule:
    return services.schedule_create(
        actor=world.admin_p,
        data={
            "name": "zz-report",
            "cron": "0 1 * * *",
            "target": TARGET,
            "depends_on": [str(upstream.id)],
        },
    )


def test_editing_keeps_an_upstream_whose_name_sorts_past_the_first_500(world: World) -> None:
    up = services.schedule_create(
        actor=world.admin_p, data={"name": "zz-export", "cron": "0 0 * * *", "target": TARGET}
    )
    child = downstream(world, up)
    client = world.client("admin")
    page = client.get(f"/schedules/{child.id}/edit").content.decode()
    data = submitted(page)
    # Change something else, submitting exactly what the page showed.
    data["jitter_s"] = ["5"]
    response = client.post(f"/schedules/{child.id}/edit", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    child.refresh_from_db()
    assert child.jitter_s == 5
    assert list(child.depends_on.values_list("id", flat=True)) == [up.id]
    assert child.next_run_at is None, "still fired by its upstream, not by its own cron"


def test_upstreams_are_typed_by_name_and_an_unknown_one_is_an_inline_error(
    world: World,
) -> None:
    up = services.schedule_create(
        actor=world.admin_p, data={"name": "zz-export", "cron": "0 0 * * *", "target": TARGET}
    )
    child = downstream(world, up)
    client = world.client("admin")
    data = submitted(client.get(f"/schedules/{child.id}/edit").content.decode())
    data["depends_on"] = ["zz-export\naaa-0519\nno-such-schedule"]
    response = client.post(f"/schedules/{child.id}/edit", data)
    assert response.status_code == 400
    html = response.content.decode()
    assert "depends_on: no schedule with the name or id &#x27;no-such-schedule&#x27;" in html
    assert list(child.depends_on.values_list("id", flat=True)) == [up.id], "nothing written"
    # Another tenant's schedule, by name or id, is just as unknown.
    data["depends_on"] = [f"zz-export\n{world.other_schedule.id}"]
    assert client.post(f"/schedules/{child.id}/edit", data).status_code == 400
    data["depends_on"] = ["zz-export\naaa-0519"]
    assert client.post(f"/schedules/{child.id}/edit", data).status_code == 302
    names = set(child.depends_on.values_list("name", flat=True))
    assert names == {"zz-export", "aaa-0519"}


def test_the_picker_search_is_tenant_scoped_and_bounded(world: World) -> None:
    client = world.client("viewer")
    html = client.get("/schedules/pick", {"q": "aaa-", "target": "id_depends_on"}).content.decode()
    assert html.count('class="pick"') == 20
    assert "type more of the name" in html
    html = client.get("/schedules/pick", {"q": "aaa-0519", "target": "x"}).content.decode()
    assert 'data-pick-value="aaa-0519"' in html and html.count('class="pick"') == 1
    theirs = client.get("/schedules/pick", {"q": "theirs"}).content.decode()
    assert "theirs" not in theirs.replace("“theirs”", "") and "No schedule matches" in theirs
    by_id = client.get("/schedules/pick", {"q": str(world.other_schedule.id)}).content.decode()
    assert 'class="pick"' not in by_id
    # The target a result fills is an element id: anything else is dropped.
    odd = client.get("/schedules/pick", {"q": "nightly", "target": '"><x'}).content.decode()
    assert 'data-pick-target=""' in odd


def test_the_explainer_takes_any_schedule_by_name_or_id(world: World) -> None:
    late = Schedule.objects.get(tenant=world.tenant, name="aaa-0519")
    client = world.client("viewer")
    at = "2026-01-05T00:00"
    response = client.get("/explain", {"schedule": "aaa-0519", "at": at})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="answer-code"' in html and 'value="aaa-0519"' in html
    by_id = client.get("/explain", {"schedule": str(late.id), "at": at})
    assert by_id.status_code == 200 and 'value="aaa-0519"' in by_id.content.decode()
    unknown = client.get("/explain", {"schedule": "no-such", "at": at})
    assert unknown.status_code == 400
    assert "schedule: no schedule with the name &#x27;no-such&#x27;" in unknown.content.decode()
    theirs = client.get("/explain", {"schedule": str(world.other_schedule.id), "at": at})
    assert theirs.status_code == 404
