"""Sphinx configuration for the django-durable-jobs documentation.

Build with::

    sphinx-build -W -b html docs docs/_build/html
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# -- Django, so autodoc can import the models ---------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

import durable_jobs  # noqa: E402

# -- Project --------------------------------------------------------------------------------

project = "django-durable-jobs"
author = "durable_jobs contributors"
copyright = "durable_jobs contributors"
release = durable_jobs.__version__
version = ".".join(release.split(".")[:2])

# -- General --------------------------------------------------------------------------------

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "requirements.txt"]
pygments_style = "friendly"
myst_heading_anchors = 3

# -- autodoc --------------------------------------------------------------------------------

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autoclass_content = "class"

# -- intersphinx ----------------------------------------------------------------------------

DJANGO_DOCS = "https://docs.djangoproject.com/en/5.2/"
_INTERSPHINX = {
    "python": ("https://docs.python.org/3", None),
    "django": (DJANGO_DOCS, f"{DJANGO_DOCS}_objects/"),
}


# Intersphinx fetches the inventories over the network at build time. Builds here are
# offline by default (a -W build would fail on the fetch alone), so links to Python and
# Django render as plain text unless DOCS_INTERSPHINX=1 asks for them.
intersphinx_mapping = _INTERSPHINX if os.environ.get("DOCS_INTERSPHINX") == "1" else {}
intersphinx_timeout = 10

# -- HTML -----------------------------------------------------------------------------------

try:
    import furo  # noqa: F401
except ImportError:
    html_theme = "alabaster"
else:
    html_theme = "furo"

html_title = f"django-durable-jobs {release}"
html_static_path: list[str] = []


def _is_model(obj: object) -> bool:
    from django.db import models

    return isinstance(obj, type) and issubclass(obj, models.Model)


def _model_signature(app, what, name, obj, options, signature, return_annotation):
    # A model's constructor takes its fields by keyword; "(*args, **kwargs)" says nothing.
    if what == "class" and _is_model(obj):
        return "", None
    return None


def _model_docstring(app, what, name, obj, options, lines):
    # Django gives a model without a docstring one listing its fields; the page does better.
    if what == "class" and _is_model(obj) and lines and lines[0].startswith(f"{obj.__name__}("):
        lines.clear()


#: Handlers take their arguments by keyword; the ParamSpec plumbing says nothing useful.
_KEYWORD_CALLS = {
    "durable_jobs.JobHandler.delay",
    "durable_jobs.JobHandler.__call__",
    "durable_jobs.handlers.ConfiguredJob.delay",
}


def _signature(app, what, name, obj, options, signature, return_annotation):
    if name in _KEYWORD_CALLS:
        return "(**kwargs)", None if name.endswith("__call__") else return_annotation
    return _model_signature(app, what, name, obj, options, signature, return_annotation)


def setup(app):
    app.connect("autodoc-process-signature", _signature)
    app.connect("autodoc-process-docstring", _model_docstring)
    # Django's documentation publishes its settings as ``std:setting`` objects, so
    # :setting:`USE_TZ` links there through intersphinx (and is plain text offline).
    app.add_crossref_type("setting", "setting", indextemplate="pair: %s; setting")
    return {"parallel_read_safe": True}
