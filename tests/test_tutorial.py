"""The tutorial (docs/tutorial/), followed from its first command to its last on a new site.

The pages are read in the order of the tutorial's toctree, and every code block on them
is run; reading fails on any code that could not be (``tests/tutorial/pages.py``).
Console commands run in bash in a temporary directory, as a reader would type them: the
virtualenv, the ``pip install`` of this checkout (its dependencies linked from this
test's environment rather than downloaded, see ``tests/tutorial/environment.py``),
``django-admin startproject``, ``migrate``, ``runserver`` and ``curl``, ``runworker
--burst``, ``jobs``, ``schedules``, and a ``python -m pytest`` of the tests the tutorial
writes. Each must exit 0 and print the output the tutorial shows
(``tests/tutorial/console.py``). Python and ini blocks are written into the files their
captions name, or edit them statement by statement (``tests/tutorial/files.py``). Every
address of the development server that the text sends the reader to is opened, as the
superuser the tutorial creates, and checked by ``VISITS`` below.

The tutorial's site always uses its own SQLite database, configured as the tutorial
configures it; this test touches no database of the suite's, so it runs the same when
the suite's ``DATABASE_URL`` is PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.tutorial.console import Command, check_output, matches
from tests.tutorial.files import merge_python
from tests.tutorial.pages import CodeBlock, LocalLink, TutorialError, read_page, read_tutorial
from tests.tutorial.site import TutorialSite

TUTORIAL = ROOT / "docs" / "tutorial"


def admin_index(page: str) -> None:
    assert "Durable jobs" in page
    assert "Overview" in page


def dead_jobs(page: str) -> None:
    # The list's rows are its action checkboxes: job 3 only, the completed ones filtered out.
    assert re.findall(r'name="_selected_action" value="(\d+)"', page) == ["3"]
    assert '<a href="/admin/durable_jobs/job/3/change/' in page


def dead_job(page: str) -> None:
    assert "shop.jobs.ship_order" in page
    assert '"order_id": 2' in page
    # Both attempts, each with its error and traceback.
    assert page.count("Traceback (most recent call last)") == 2
    assert page.count("KeyError: 'CA'") >= 2


#: The pages the tutorial sends the reader to, and what the reader must find there.
VISITS: dict[str, Callable[[str], None]] = {
    "/admin/": admin_index,
    "/admin/durable_jobs/job/?state__exact=dead": dead_jobs,
    "/admin/durable_jobs/job/3/change/": dead_job,
}


@pytest.mark.subprocess
def test_following_the_tutorial_from_start_to_finish(tmp_path: Path) -> None:
    pages = read_tutorial(TUTORIAL)
    site = TutorialSite(tmp_path, checkout=ROOT)
    visited = []
    try:
        for page in pages:
            for item in page.items:
                if isinstance(item, LocalLink):
                    if item.path not in VISITS:
                        raise TutorialError(f"{item.where}: nothing checks {item.url}")
                    VISITS[item.path](site.visit(item))
                    visited.append(item.path)
                else:
                    site.run(item)
            site.end_page()
    finally:
        site.close()
    assert sorted(set(visited)) == sorted(VISITS)
    # The site ran the package that the tutorial's pip install put in its virtualenv.
    assert site.virtualenv is not None
    location = site.shell(
        'python -c "import durable_jobs; print(durable_jobs.__file__)"', where="the end"
    )
    assert Path(location.strip()).is_relative_to(site.virtualenv.path)


# -- the reading refuses what it could not run ------------------------------------------------


@pytest.mark.parametrize(
    "rst",
    [
        ".. code-block:: text\n\n   queued -> leased\n",
        ".. code-block:: python\n\n   print('which file?')\n",
        ".. code-block:: pycon\n\n   >>> 1 + 1\n   2\n",
        "Like this::\n\n   python manage.py runworker\n",
        ">>> 1 + 1\n2\n",
        ".. literalinclude:: ../../example_project/manage.py\n",
        ".. code-block:: python\n   :caption: shop/jobs.py\n   :linenos:\n\n   x = 1\n",
    ],
)
def test_code_that_no_test_runs_fails_the_reading(tmp_path: Path, rst: str) -> None:
    page = tmp_path / "page.rst"
    page.write_text(f"Title\n=====\n\n{rst}")
    with pytest.raises(TutorialError):
        read_page(page)


def test_reading_finds_blocks_with_their_files_and_the_links_in_the_text(tmp_path: Path) -> None:
    page = tmp_path / "page.rst"
    page.write_text(
        "Title\n=====\n\n"
        ".. code-block:: python\n   :caption: shop/jobs.py\n\n   X = 1\n\n"
        "Open http://127.0.0.1:8000/admin/.\n\n"
        ".. code-block:: console\n\n   $ python manage.py jobs\n   Nothing to show.\n"
    )
    first, link, last = read_page(page).items
    assert isinstance(first, CodeBlock)
    assert (first.caption, first.text, first.text_line) == ("shop/jobs.py", "X = 1\n", 7)
    assert isinstance(link, LocalLink)
    assert link.path == "/admin/"
    assert isinstance(last, CodeBlock)
    assert (last.language, last.text) == ("console", "$ python manage.py jobs\nNothing to show.\n")


# -- file blocks edit files as the text says -----------------------------------------------


STARTPROJECT_SETTINGS = """\
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

# Application definition

INSTALLED_APPS = [
    'django.contrib.admin',
]

DEBUG = True
"""


def test_a_file_block_replaces_what_it_names_and_adds_the_rest() -> None:
    merged = merge_python(
        STARTPROJECT_SETTINGS,
        'from pathlib import PurePath\nimport os\n\nINSTALLED_APPS = ["durable_jobs"]\n\n'
        "DURABLE_JOBS = {}\n\n\ndef f():\n    return os\n",
    )
    assert merged == (
        "from pathlib import Path, PurePath\nimport os\n\n"
        "BASE_DIR = Path(__file__).resolve().parent.parent\n\n"
        "# Application definition\n\n"
        'INSTALLED_APPS = ["durable_jobs"]\n\n'
        "DEBUG = True\n\n"
        "DURABLE_JOBS = {}\n\n\n"
        "def f():\n    return os\n"
    )


def test_a_definition_is_replaced_with_its_decorators_and_comments() -> None:
    original = "import x\n\n#: old\n@job\ndef f():\n    return 1\n\n\ndef g():\n    pass\n"
    merged = merge_python(original, "#: new\n@job(max_retries=1)\ndef f():\n    return 2\n")
    assert merged == (
        "import x\n\n#: new\n@job(max_retries=1)\ndef f():\n    return 2\n\n\ndef g():\n    pass\n"
    )


@pytest.mark.parametrize("addition", ['INSTALLED_APPS += ["shop"]\n', "print('hello')\n"])
def test_a_statement_with_no_place_in_an_existing_file_fails(addition: str) -> None:
    with pytest.raises(TutorialError, match="only imports, definitions and assignments"):
        merge_python(STARTPROJECT_SETTINGS, addition)


# -- shown output is what was printed -------------------------------------------------


def test_shown_output_matches_what_changes_from_run_to_run() -> None:
    shown = (
        "2026-12-02 09:30:01,112 INFO durable_jobs.worker: worker steady-otter-3fa9c1 "
        "started (pid 4811, queues default:10)",
        "...",
        "Subject: Your order #1",
        "Date: ...",
        "ID  STATE      CREATED (UTC)",
        "1   completed  2026-12-02 09:29:40",
    )
    printed = (
        "2027-01-05 23:59:59,999 INFO durable_jobs.worker: worker quiet-lynx-77d2e0 "
        "started (pid 12, queues default:10)\n"
        "Content-Type: text/plain\nMIME-Version: 1.0\n"
        "Subject: Your order #1\n"
        "Date: Tue, 05 Jan 2027 23:59:59 -0000\n"
        "ID  STATE          CREATED (UTC)\n"
        "1   completed      2027-01-05 23:59:58\n\n"
    )
    assert matches(shown, printed)
    assert not matches(shown, printed.replace(" INFO ", " ERROR "))
    assert not matches(shown, printed.replace("completed", "dead     "))
    assert not matches(shown, printed.replace("Subject: Your order #1\n", ""))
    assert not matches(shown, printed + "2   queued  2027-01-05 23:59:59\n")


def test_output_that_differs_fails_with_both_versions() -> None:
    block = CodeBlock(TUTORIAL / "worker.rst", 1, "console", None, "", 3)
    command = Command(block, 3, "python manage.py jobs", ("Nothing to show.",))
    check_output(command, "Nothing to show.\n")
    with pytest.raises(TutorialError, match=re.escape("--- printed ---\n1 job")):
        check_output(command, "1 job\n")


def test_pip_never_installs_outside_the_tutorials_virtualenv(tmp_path: Path) -> None:
    # Before the tutorial's virtualenv is active, `python` is the interpreter running the
    # suite: a pip install there would change the suite's own environment.
    site = TutorialSite(tmp_path, checkout=ROOT)
    install = "$ python -m pip install /path/to/django-durable-jobs\n"
    block = CodeBlock(TUTORIAL / "install.rst", 1, "console", None, install, 3)
    with pytest.raises(TutorialError, match="outside the tutorial's venv"):
        site.run(block)
    assert not (tmp_path / "transcript.txt").exists()  # nothing ran
