"""Every dashboard page, given nonsense: never a 5xx.

Each GET page is asked with every query key the screens read, each set to a value from a
list of troublemakers (empty, huge, negative, NUL, markup, broken JSON, bad dates, unknown
search words); each POST page, as its owner and with its CSRF token, gets every form field
the screens read set to each of them. A bad value must end as a page that says so (4xx) or
is ignored, never as a server error. Marked ``fuzz`` (about a minute): it runs with the long
proofs.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.web.access import Role
from codity.web.dashboard.routes import DASHBOARD_PAGES
from tests.dashboard import sign_in
from tests.sqlapi import one
from tests.webapp import add_user, make_tenant, web_client

pytestmark = pytest.mark.fuzz

TROUBLE = [
    "",
    "x",
    "-1",
    "0",
    "99999999999999999999",
    "\x00",
    "<script>alert(1)</script>",
    "a" * 5000,
    '{"a":',
    "[]",
    "null",
    "1e308",
    "state:nope",
    "payload.a.b:",
    'task:"unterminated',
    "after:notadate",
    "before:2026-13-45",
    "queue:" + "q" * 300,
    "id:abc worker:-5",
    "retry",
    "cancel",
    "1,2,3",
    "owner",
]
QUERY_KEYS = [
    "q", "state", "queue", "task", "id", "worker", "worker_id", "payload", "after", "before",
    "cursor", "show", "range", "minutes", "replayed", "action", "limit", "dead_after",
]  # fmt: skip
FORM_FIELDS = [
    "action", "ids", "filters", "up_to_id", "project_id", "email", "role", "name", "pick-1",
    "back", "confirmed", "queue", "task", "replayed", "dead_after", "count",
]  # fmt: skip
_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")


def test_no_page_answers_nonsense_with_a_server_error(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    tenant = make_tenant(conn)
    owner = add_user(conn, tenant, Role.OWNER)
    project = tenant.project_id
    conn.execute("SELECT * FROM codity.create_queue('emails', %s)", [project])
    conn.execute(
        "SELECT * FROM codity.create_schedule('nightly', 'emails', '0 2 * * *', 't', '{}',"
        " 'UTC', 0, %s)",
        [project],
    )
    values = {
        "job_id": one(conn, "SELECT job_id FROM codity.enqueue('emails', 't', p_project_id => %s)",
                      [project]),
        "dead_letter_id": 1,
        "worker_id": 1,
        "user_id": owner.user_id,
        "key_id": 1,
        "workflow_id": one(
            conn,
            "SELECT workflow_id FROM codity.enqueue_workflow(%s, %s) LIMIT 1",
            [Jsonb({"name": "wf", "nodes": [{"key": "a", "queue": "emails", "task": "t"}]}),
             project],
        ),
        "node_key": "a",
    }  # fmt: skip

    def fill(path: str) -> str:
        schedule = path.startswith(("/schedules", "/fragments/schedules"))
        return _PARAM.sub(
            lambda m: (
                ("nightly" if schedule else "emails")
                if m.group(1) == "name"
                else str(values[m.group(1)])
            ),
            path,
        )

    errors = []
    with web_client(db_url) as client:
        session = sign_in(client, conn, owner)
        for page in DASHBOARD_PAGES:
            if page.path in ("/events", "/signin", "/signout", "/switch"):
                continue
            path = fill(page.path)
            for key, value in itertools.product(
                QUERY_KEYS if page.method == "GET" else FORM_FIELDS, TROUBLE
            ):
                if page.method == "GET":
                    answer = session.get(path, params={key: value}, follow_redirects=False)
                else:
                    answer = session.post(path, {key: value})
                if answer.status_code >= 500:
                    errors.append((page.name, key, value[:30], answer.status_code))
    assert errors == []
