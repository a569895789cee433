"""The admin in another language, and the shipped catalog kept in step with the code.

A translator's path, for real: Django's ``makemessages`` extracts the marked strings
of a copy of the package into a French catalog, a few of them are translated,
``compilemessages`` builds it, and the admin pages (job list, job page, an action's
message, the overview) are read through it. Both commands need GNU gettext
(``xgettext``, ``msgmerge``, ``msgfmt``; Debian's ``gettext`` package).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import translation

import durable_jobs
from durable_jobs.models import Job
from durable_jobs.testing import drain
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

PACKAGE = Path(durable_jobs.__file__).resolve().parent
SHIPPED = PACKAGE / "locale" / "en" / "LC_MESSAGES" / "django.po"
#: The command that regenerates SHIPPED (docs/howto/admin.rst says the same).
MAKEMESSAGES = "cd durable_jobs && django-admin makemessages --locale en --add-location file"

#: (context, msgid) -> the French, or its singular and plural forms.
FRENCH: dict[tuple[str, str], str | tuple[str, str]] = {
    # The job list: an action, a column, a badge, a filter, the search help, the count.
    ("", "Retry now (dead, cancelled or retrying jobs)"): "Relancer (tâches mortes ou annulées)",
    ("", "state"): "état",
    ("status", "dead"): "morte",
    ("", "handler"): "gestionnaire",
    ("", "A job id, a handler's full name, or an idempotency key."): "Un numéro de tâche.",
    ("", "job"): "tâche",
    ("", "jobs"): "tâches",
    # A job's page: a fieldset, a field, its help, an attempt's outcome.
    ("", "Payload and result"): "Charge utile et résultat",
    ("", "max retries"): "reprises au plus",
    ("", "Seconds; none when empty."): "En secondes ; vide pour aucune.",
    ("", "Discarded"): "Abandonnée",
    # An action's message.
    ("", "%(count)d job retried"): ("%(count)d tâche relancée", "%(count)d tâches relancées"),
    ("", "%(done)s; %(count)d skipped (%(why)s)."): (
        "%(done)s ; %(count)d ignorée (%(why)s).",
        "%(done)s ; %(count)d ignorées (%(why)s).",
    ),
    ("", "not dead, cancelled or retrying"): "ni morte, ni annulée, ni en attente",
    # The overview.
    ("", "Jobs overview"): "Aperçu des tâches",
    ("", "Top errors, last 24 hours"): "Erreurs principales, dernières 24 heures",
    ("", "%(failed)s failed attempt, %(completed)s completed"): (
        "%(failed)s tentative échouée, %(completed)s terminée",
        "%(failed)s tentatives échouées, %(completed)s terminées",
    ),
}


def django_admin(cwd: Path, *args: str) -> None:
    """``django-admin args`` in ``cwd``, with no settings, as a contributor runs it."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    # -P: not the package directory on sys.path, where durable_jobs/logging.py would
    # shadow the standard library's.
    done = subprocess.run(
        [sys.executable, "-P", "-m", "django", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"django-admin {' '.join(args)}:\n{done.stdout}{done.stderr}"


def entries(po: str) -> dict[tuple[str, str], dict[str, str]]:
    """A catalog's entries by (context, msgid), each its keywords' strings; no header.

    Entries are the blank-line separated blocks that gettext writes; comments (``#``,
    which includes obsolete ``#~`` entries) are skipped.
    """
    found = {}
    for block in po.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line.startswith('"'):  # a long string continues
                fields[key] += ast.literal_eval(line)
            else:
                key, _, text = line.partition(" ")
                fields[key] = ast.literal_eval(text)
        if fields.get("msgid"):
            found[(fields.get("msgctxt", ""), fields["msgid"])] = fields
    return found


def translated(po: str, translations: dict[tuple[str, str], str | tuple[str, str]]) -> str:
    """The catalog with ``translations`` filled in (each must be one of its entries)."""
    wanted = dict(translations)
    blocks = po.split("\n\n")
    # A fresh catalog's header is marked fuzzy; msgfmt ignores fuzzy entries.
    blocks[0] = blocks[0].replace("#, fuzzy\n", "")
    for i, block in enumerate(blocks):
        keys = list(entries(block))
        if not keys or keys[0] not in wanted:
            continue
        forms = wanted.pop(keys[0])
        if isinstance(forms, str):
            block = block.replace('\nmsgstr ""', f"\nmsgstr {quoted(forms)}")
        else:
            for n, form in enumerate(forms):
                block = block.replace(f'\nmsgstr[{n}] ""', f"\nmsgstr[{n}] {quoted(form)}")
        blocks[i] = block
    assert not wanted, f"not marked for translation: {sorted(wanted)}"
    return "\n\n".join(blocks)


def quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package and its fresh English and French catalogs (makemessages)."""
    for tool in ("xgettext", "msgmerge", "msgfmt"):
        if shutil.which(tool) is None:
            pytest.fail(f"GNU gettext's {tool} is missing: run make install-system")
    copy = tmp_path_factory.mktemp("i18n") / "durable_jobs"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "locale"))
    (copy / "locale").mkdir()
    django_admin(copy, "makemessages", "--locale", "en", "--locale", "fr", "--no-wrap")
    return copy


@pytest.fixture(scope="module")
def french_catalog(extracted: Path) -> Path:
    """The locale directory of a compiled French catalog with FRENCH translated."""
    po = extracted / "locale" / "fr" / "LC_MESSAGES" / "django.po"
    po.write_text(translated(po.read_text(encoding="utf-8"), FRENCH), encoding="utf-8")
    django_admin(extracted, "compilemessages", "--locale", "fr")
    assert po.with_suffix(".mo").exists()
    return extracted / "locale"


@pytest.fixture
def french(french_catalog: Path) -> Iterator[None]:
    # LOCALE_PATHS come before the apps' own catalogs, as a project's overrides do.
    with (
        override_settings(LOCALE_PATHS=[str(french_catalog)], LANGUAGE_CODE="fr"),
        translation.override("fr"),
    ):
        yield


@pytest.fixture
def finished_jobs() -> dict[str, Job]:
    """A dead job (its one attempt discarded) and a completed one."""
    dead, completed = jobs.discarder.delay(), jobs.add.delay(a=1)
    drain()
    dead.refresh_from_db()
    completed.refresh_from_db()
    assert (dead.state, completed.state) == ("dead", "completed")
    return {"dead": dead, "completed": completed}


def page(client: Client, url: str, **params: object) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, response
    return response.content.decode()


def test_the_job_list_reads_in_the_active_language(
    admin_client: Client, french: None, finished_jobs: dict[str, Job]
) -> None:
    html = page(admin_client, reverse("admin:durable_jobs_job_changelist"))
    assert "Relancer (tâches mortes ou annulées)" in html  # the action
    assert "Retry now (dead" not in html
    # The column; Django 6.0+ capitalizes the header ("État"), 5.2 does not.
    assert re.search(r"<th [^>]*column-state_badge[^>]*>.*?état", html, re.S | re.I)
    assert ">morte</span>" in html  # the dead job's badge
    assert ">dead</span>" not in html
    assert "gestionnaire" in html  # the handler filter's title
    assert "Un numéro de tâche." in html  # the search box's help
    assert "2 tâches" in html  # the count, with the model's plural name


def test_a_job_page_reads_in_the_active_language(
    admin_client: Client, french: None, finished_jobs: dict[str, Job]
) -> None:
    dead = finished_jobs["dead"]
    html = page(admin_client, reverse("admin:durable_jobs_job_change", args=[dead.pk]))
    assert "Charge utile et résultat" in html  # a fieldset
    assert "Payload and result" not in html
    assert "Reprises au plus" in html  # a field's label (capitalised by the admin)
    assert "En secondes ; vide pour aucune." in html  # its help text
    assert "Abandonnée" in html  # the attempt's outcome, a choice's label
    assert "Discarded" not in html


def test_an_action_reports_in_the_active_language(
    admin_client: Client, french: None, finished_jobs: dict[str, Job]
) -> None:
    response = admin_client.post(
        reverse("admin:durable_jobs_job_changelist"),
        {
            "action": "retry_now",
            "_selected_action": [str(j.pk) for j in finished_jobs.values()],
            "index": "0",
        },
        follow=True,
    )
    messages = [str(m) for m in response.context["messages"]]
    assert messages == ["1 tâche relancée ; 1 ignorée (ni morte, ni annulée, ni en attente)."]


def test_the_overview_reads_in_the_active_language(
    admin_client: Client, french: None, finished_jobs: dict[str, Job]
) -> None:
    html = page(admin_client, reverse("admin:durable_jobs_overview_changelist"))
    assert "<h1>Aperçu des tâches</h1>" in html
    assert "Erreurs principales, dernières 24 heures" in html
    assert "Top errors" not in html
    # French counts 0 and 1 in the singular: the catalog's plural forms are applied.
    assert "1 tentative échouée, 1 terminée" in html


def test_the_shipped_catalog_holds_exactly_the_marked_strings(extracted: Path) -> None:
    fresh = entries((extracted / "locale" / "en" / "LC_MESSAGES" / "django.po").read_text())
    shipped = entries(SHIPPED.read_text(encoding="utf-8"))
    assert len(fresh) > 200  # the admin's strings, the models' names and the templates'

    def plurals(catalog: dict[tuple[str, str], dict[str, str]]) -> set[tuple[str, str, str]]:
        return {(*key, fields.get("msgid_plural", "")) for key, fields in catalog.items()}

    out_of_date = f"{SHIPPED} is out of date: run `{MAKEMESSAGES}`"
    assert sorted(plurals(fresh) - plurals(shipped)) == [], f"{out_of_date}; missing these"
    assert sorted(plurals(shipped) - plurals(fresh)) == [], f"{out_of_date}; these are stale"
