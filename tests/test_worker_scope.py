"""A worker claims only from its own project and from the queues it registered for.

Registered for one project and named queues, a worker may claim from those only; one that
named none serves every queue of its project, never another project's. Which project is
the worker row's business: claim takes no project argument to get wrong. And a worker that
may read no table still learns which queue a wake-up is about (codity.worker_queues maps the
ids that codity_v1 notifications carry). Shown as a real login holding only codity_worker.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.logins import login_role
from tests.sqlapi import make_project

Conn = psycopg.Connection[Any]


@pytest.fixture
def two_projects(db_url: str) -> tuple[int, int]:
    """Projects A and B, each with queues emails and reports holding one job each."""
    with psycopg.connect(db_url, autocommit=True) as admin:
        a, b = make_project(admin, "org-a")[1], make_project(admin, "org-b")[1]
        for project in (a, b):
            for queue in ("emails", "reports"):
                admin.execute("SELECT codity.create_queue(%s, %s)", [queue, project])
                admin.execute(
                    "SELECT codity.enqueue(%s, %s, p_project_id => %s)",
                    [queue, f"{queue}-{project}", project],
                )
    return a, b


def _claim(conn: Conn, worker: int, queue: str) -> list[str]:
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT task FROM codity.claim(%s, %s, 10)", [worker, queue]
        ).fetchall()
    ]


def test_a_worker_claims_only_from_the_queues_it_registered_for(
    db_url: str, two_projects: tuple[int, int]
) -> None:
    a, _b = two_projects
    with login_role(db_url, "codity_worker") as url, psycopg.connect(url, autocommit=True) as w:
        (worker,) = w.execute(
            "SELECT codity.register_worker('w', ARRAY['emails'], p_project_id => %s)", [a]
        ).fetchone() or (0,)
        with pytest.raises(psycopg.Error, match='may not claim from queue "reports"') as refused:
            w.execute("SELECT * FROM codity.claim(%s, 'reports', 10)", [worker])
        assert refused.value.sqlstate == "CD023"
        assert _claim(w, worker, "emails") == [f"emails-{a}"], "its own project's emails only"


def test_a_worker_that_named_no_queue_serves_its_project_and_no_other(
    db_url: str, two_projects: tuple[int, int]
) -> None:
    a, b = two_projects
    with login_role(db_url, "codity_worker") as url, psycopg.connect(url, autocommit=True) as w:
        (worker,) = w.execute(
            "SELECT codity.register_worker('w', p_project_id => %s)", [b]
        ).fetchone() or (0,)
        assert _claim(w, worker, "emails") + _claim(w, worker, "reports") == [
            f"emails-{b}",
            f"reports-{b}",
        ]
    with psycopg.connect(db_url, autocommit=True) as admin:
        untouched = admin.execute(
            "SELECT j.task FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id"
            " WHERE q.project_id = %s AND j.status = 'queued' ORDER BY 1",
            [a],
        ).fetchall()
    assert untouched == [(f"emails-{a}",), (f"reports-{a}",)]


def test_by_queue_id_a_worker_still_claims_only_in_its_project_and_registered_queues(
    db_url: str, two_projects: tuple[int, int]
) -> None:
    """claim_in_queue takes any id; the worker row still decides. Another project's queue
    reads as missing (its id is not confirmed to exist), an unregistered one is refused."""
    a, b = two_projects
    with psycopg.connect(db_url, autocommit=True) as admin:
        ids: dict[str, int] = dict(
            admin.execute(
                "SELECT q.project_id || '/' || q.name, q.id FROM codity.queues q"
            ).fetchall()
        )
    with login_role(db_url, "codity_worker") as url, psycopg.connect(url, autocommit=True) as w:
        (worker,) = w.execute(
            "SELECT codity.register_worker('w', ARRAY['emails'], p_project_id => %s)", [a]
        ).fetchone() or (0,)
        claim = "SELECT task FROM codity.claim_in_queue(%s, %s, 10)"
        with pytest.raises(psycopg.Error, match=f"queue {ids[f'{b}/emails']} does not exist") as e:
            w.execute(claim, [ids[f"{b}/emails"], worker])
        assert e.value.sqlstate == "CD001"
        with pytest.raises(psycopg.Error, match='may not claim from queue "reports"') as e:
            w.execute(claim, [ids[f"{a}/reports"], worker])
        assert e.value.sqlstate == "CD023"
        assert w.execute(claim, [ids[f"{a}/emails"], worker]).fetchall() == [(f"emails-{a}",)]


def test_the_worker_maps_a_wake_up_to_its_queue_without_reading_a_table(
    db_url: str, two_projects: tuple[int, int]
) -> None:
    a, _b = two_projects
    with (
        login_role(db_url, "codity_worker") as url,
        psycopg.connect(url, autocommit=True) as w,
        psycopg.connect(url, autocommit=True) as listener,
    ):
        (worker,) = w.execute(
            "SELECT codity.register_worker('w', ARRAY['reports', 'emails'], p_project_id => %s)",
            [a],
        ).fetchone() or (0,)
        queues = {
            int(r[0]): str(r[1])
            for r in w.execute("SELECT queue_id, queue FROM codity.worker_queues(%s)", [worker])
        }
        assert sorted(queues.values()) == ["emails", "reports"]
        listener.execute("LISTEN codity_v1")
        w.execute("SELECT codity.enqueue('reports', 'wake', p_project_id => %s)", [a])
        notice = next(listener.notifies(timeout=5, stop_after=1))
        assert queues[int(notice.payload)] == "reports"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute("SELECT id, name FROM codity.queues")
