"""The admin dashboard in a real browser: log in, find the overview, retry a dead job.

Runs against pytest-django's live server with Debian's Chromium (see conftest.py), so
it exercises what the other admin tests cannot: the real login form, the links an
operator follows, and the changelist's action form as a browser submits it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, Response, expect

from durable_jobs.models import Job
from durable_jobs.states import State
from durable_jobs.testing import drain
from tests.testapp import jobs

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

USERNAME = "operator"
PASSWORD = "correct horse battery staple"
RETRY_ACTION = "Retry now (dead, cancelled or retrying jobs)"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def screenshot(page: Page, path: Path) -> None:
    page.screenshot(path=path, full_page=True)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE), f"{path} is not a PNG"
    assert len(data) > len(PNG_SIGNATURE), f"{path} is empty"


def test_operator_finds_the_overview_and_retries_a_dead_job(
    page: Page, artifacts_dir: Path, vendor: str
) -> None:
    User.objects.create_superuser(USERNAME, "operator@example.com", PASSWORD)
    # No retries left after the first failure, so one drain makes it dead.
    dead = jobs.always_fails.using(max_retries=0).delay()
    drain()
    dead.refresh_from_db()
    assert dead.state == State.DEAD

    # A page that crashes (JavaScript error or HTTP 5xx) must fail the test even when
    # the text it looks for happens to be there.
    page_errors: list[str] = []
    server_errors: list[str] = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))

    def on_response(response: Response) -> None:
        if response.status >= 500:
            server_errors.append(f"{response.status} {response.url}")

    page.on("response", on_response)

    # Log in through the real form, as a person would.
    page.goto(reverse("admin:index"))
    expect(page).to_have_url(re.compile(re.escape(reverse("admin:login"))))
    page.get_by_label("Username").press_sequentially(USERNAME)
    page.get_by_label("Password").press_sequentially(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(re.escape(reverse("admin:index")) + "$"))
    expect(page.locator("#user-tools")).to_contain_text(USERNAME)

    # The overview is reached from the admin index, in the app's own section.
    app_section = page.locator("#content-main .app-durable_jobs")
    app_section.get_by_role("link", name="Overview", exact=True).click()
    expect(page.locator("#content h1")).to_contain_text("Jobs overview")
    expect(page).to_have_url(
        re.compile(re.escape(reverse("admin:durable_jobs_overview_changelist")) + "$")
    )
    screenshot(page, artifacts_dir / f"overview-{vendor}.png")

    # The overview's top error leads to the jobs that failed with it.
    error_row = page.locator("tr.dj-error").filter(has_text="KeyError: 'missing'")
    expect(error_row.locator("td.dj-count")).to_have_text("1")
    error_row.get_by_role("link", name="jobs").click()
    changelist = reverse("admin:durable_jobs_job_changelist")
    expect(page).to_have_url(re.compile(re.escape(changelist) + r"\?error=\d+$"))
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    filtered_list = page.url

    # The dead job's page shows why it died: its attempt's error.
    row = page.locator("#result_list tbody tr").filter(
        has=page.get_by_role("link", name=str(dead.pk), exact=True)
    )
    expect(row.locator("td.field-state_badge")).to_have_text("dead")
    row.get_by_role("link", name=str(dead.pk), exact=True).click()
    expect(page).to_have_url(
        # The admin keeps the list's filters in the link, to come back to them.
        re.compile(re.escape(reverse("admin:durable_jobs_job_change", args=[dead.pk])) + r"(\?|$)")
    )
    expect(page.locator(".inline-group")).to_contain_text("ValueError: cannot process")

    # Back on the list, retry it with the action, as an operator would.
    page.go_back()
    expect(page).to_have_url(filtered_list)
    row.get_by_role("checkbox").check()
    # The label wraps the select, so its accessible name includes every option's text.
    page.locator("select[name=action]").select_option(label=RETRY_ACTION)
    # The action form's submit button ("Go" before Django 6.1, "Run" since).
    page.locator("#changelist-form button[name=index]").first.click()
    expect(page.locator(".messagelist")).to_contain_text("1 job retried.")
    expect(row.locator("td.field-state_badge")).to_have_text("queued")
    screenshot(page, artifacts_dir / f"retried-{vendor}.png")

    assert Job.objects.get(pk=dead.pk).state == State.QUEUED
    assert page_errors == []
    assert server_errors == []
