"""Secret-looking keys masked wherever a payload, a result or metadata is shown: the rule,
then the admin, the CLI and the logs, with the spellings users and libraries write."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from durable_jobs.redaction import MASK, is_secret_key, redact
from tests.conftest import command_output
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

#: Keys whose values must never be shown, each with a value that appears nowhere else.
SECRET_KEYS = [
    # Django's SafeExceptionReporterFilter words, as substrings.
    "signing_key", "access_key", "x-api-key", "auth_header", "passphrase", "api",
    "AUTH", "Token", "signature",
    # Spellings a header, a JSON API or a config file uses.
    "Api-Key", "X-Api-Key", "privateKey", "private-key", "pwd", "auth", "bearer", "jwt",
    "dsn", "credentials", "Cookie", "sessionid", "password", "client_secret",
]  # fmt: skip
PLAIN_KEYS = ["order_id", "email", "name", "amount_cents", "country"]


def payload() -> dict:
    data: dict = {key: f"value-of-{index}" for index, key in enumerate(SECRET_KEYS)}
    data.update({key: f"plain-{key}" for key in PLAIN_KEYS})
    data["headers"] = [["Authorization", "value-of-header"], ["Accept", "application/json"]]
    data["nested"] = [{"refresh_token": "value-of-nested"}]
    return data


def shown_secrets(text: str) -> list[str]:
    return [word for word in ("value-of-", "Bearer") if word in text]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_each_secret_spelling_is_masked(key: str) -> None:
    assert is_secret_key(key)
    assert redact({key: "s"}) == {key: MASK}


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_plain_keys_are_shown(key: str) -> None:
    assert redact({key: 1}) == {key: 1}


def test_pairs_are_masked_by_name_and_other_lists_are_left_alone() -> None:
    assert redact({"h": [["Authorization", "Bearer x"], ["Accept", "json"]]}) == {
        "h": [["Authorization", MASK], ["Accept", "json"]]
    }
    assert redact({"tags": ["api", "public"]}) == {"tags": ["api", "public"]}


def test_redact_keys_adds_words_to_the_built_in_ones() -> None:
    with override_settings(DURABLE_JOBS={"REDACT_KEYS": ["iban"]}):
        assert redact({"IBAN": "DE89", "password": "p", "order": 1}) == {
            "IBAN": MASK,
            "password": MASK,
            "order": 1,
        }


def test_secrets_are_masked_in_the_admin_the_cli_and_the_logs(admin_client, json_lines) -> None:
    job = jobs.add.using(meta=payload()).delay(a=payload())

    logged = json.dumps(json_lines())
    assert '"event": "enqueued"' in logged
    assert shown_secrets(logged) == []
    assert "plain-order_id" in logged

    page = admin_client.get(f"/admin/durable_jobs/job/{job.pk}/change/").content.decode()
    assert shown_secrets(page) == []
    assert "plain-order_id" in page

    for args in (("show", str(job.pk)), ("show", str(job.pk), "--json"), ("list", "--json")):
        output = command_output("jobs", *args)
        assert shown_secrets(output) == [], args
        assert "plain-order_id" in output
    shown = json.loads(command_output("jobs", "show", str(job.pk), "--json"))
    assert shown["payload"]["a"]["X-Api-Key"] == MASK
    assert shown["meta"]["headers"] == [["Authorization", MASK], ["Accept", "application/json"]]
