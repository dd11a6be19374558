"""``codity migrate --citus`` on a real Citus 14 cluster: idempotent, complete on every node,
refused in one sentence where it cannot work, and followed by migrations written later.

- A second ``codity migrate --citus`` (the real command) changes nothing: the catalogue of
  every node, Citus's metadata (tables, shards, placements, distributed functions) and the
  rows are the same before and after.
- After the one ``migrate --citus`` a new installation runs, every function of schema
  ``codity`` exists on every node: a body delegated to a worker node calls helpers there.
- Where it cannot work it says so in one line and changes nothing: ``--citus`` on a server
  without Citus (the suite's plain embedded server), plain ``codity migrate`` on a coordinator
  that has worker nodes, ``--citus`` on a worker node.
- A migration written after distribution (a temporary copy of sql/ with a migration 0099
  adding a column and an index to ``codity.jobs``, and a by-queue body using them) reaches
  every shard (``run_command_on_shards``), and the body runs delegated to the queue's node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from codity.db import citus as citus_distribution
from codity.db import migrate
from codity.db.migrate import sql_dir
from tests.citus import CitusCluster
from tests.processes import CODITY
from tests.sqlapi import create_queue, enqueue_many_call, table_snapshot

pytestmark = pytest.mark.citus

Rows = list[tuple[Any, ...]]

# -- the catalogue, node by node -------------------------------------------------------------

# On every node: what codity's schema holds (the shards' tables on the workers included).
_NODE_CATALOGUE = {
    "functions": (
        "SELECT p.oid::regprocedure::text, pg_catalog.md5(p.prosrc), p.proconfig::text,"
        " p.proowner::regrole::text, p.prosecdef"
        " FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'codity'::regnamespace ORDER BY 1"
    ),
    "relations": (
        "SELECT c.relname::text, c.relkind::text, c.relowner::regrole::text, c.relrowsecurity"
        " FROM pg_catalog.pg_class c WHERE c.relnamespace = 'codity'::regnamespace ORDER BY 1"
    ),
    "columns": (
        "SELECT c.relname::text, a.attname::text, a.atttypid::regtype::text, a.attnotnull"
        " FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"
        " WHERE c.relnamespace = 'codity'::regnamespace AND a.attnum > 0"
        " AND NOT a.attisdropped ORDER BY 1, 2"
    ),
    "policies": (
        "SELECT p.tablename::text, p.policyname::text, p.roles::text, p.qual"
        " FROM pg_catalog.pg_policies p WHERE p.schemaname = 'codity' ORDER BY 1, 2"
    ),
    "roles": (
        "SELECT r.rolname::text, r.rolcanlogin FROM pg_catalog.pg_roles r"
        " WHERE r.rolname LIKE 'codity%' ORDER BY 1"
    ),
    "grants": (
        "SELECT p.oid::regprocedure::text, p.proacl::text FROM pg_catalog.pg_proc p"
        " WHERE p.pronamespace = 'codity'::regnamespace ORDER BY 1"
    ),
}

# On the coordinator: Citus's metadata of the distribution.
_CITUS_METADATA = {
    "tables": (
        "SELECT p.logicalrelid::regclass::text, p.partmethod::text, p.colocationid, p.repmodel"
        "::text FROM pg_catalog.pg_dist_partition p ORDER BY 1"
    ),
    "shards": (
        "SELECT s.logicalrelid::regclass::text, s.shardid, s.shardminvalue, s.shardmaxvalue"
        " FROM pg_catalog.pg_dist_shard s ORDER BY 1, 2"
    ),
    "placements": ("SELECT p.shardid, p.groupid FROM pg_catalog.pg_dist_placement p ORDER BY 1, 2"),
    "functions": (
        "SELECT o.objid::regprocedure::text, o.distribution_argument_index, o.colocationid"
        " FROM pg_catalog.pg_dist_object o"
        " WHERE o.classid = 'pg_catalog.pg_proc'::regclass ORDER BY 1"
    ),
    "database settings": (
        "SELECT s.setconfig::text FROM pg_catalog.pg_db_role_setting s"
        " JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase"
        " WHERE d.datname = pg_catalog.current_database() ORDER BY 1"
    ),
    "migrations": "SELECT migration_id FROM public._yoyo_migration ORDER BY 1",
}


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def _catalogue(cluster: CitusCluster, url: str) -> dict[str, Any]:
    database = _dbname(url)
    found: dict[str, Any] = {}
    for what, query in _NODE_CATALOGUE.items():
        for port, rows in cluster.on_every_node(database, query).items():
            found[f"{what} on :{port}"] = rows
    with psycopg.connect(url, autocommit=True) as conn:
        for what, query in _CITUS_METADATA.items():
            found[f"citus {what}"] = conn.execute(query).fetchall()
        found["rows"] = table_snapshot(conn)
    return found


def _changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """What differs, by part, as (only before, only after) row lists."""
    changed: dict[str, tuple[Any, Any]] = {}
    for part in sorted(set(before) | set(after)):
        old, new = before.get(part), after.get(part)
        if old == new:
            continue
        if isinstance(old, list) and isinstance(new, list):
            changed[part] = ([r for r in old if r not in new], [r for r in new if r not in old])
        else:
            changed[part] = (old, new)
    return changed


def _codity(url: str, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """The real command line, with ``url`` as DATABASE_URL."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CODITY_LOG_FORMAT")}
    env.update(DATABASE_URL=url, **settings)
    return subprocess.run([*CODITY, *args], env=env, capture_output=True, text=True, timeout=300)


def _one_sentence(result: subprocess.CompletedProcess[str], text: str) -> None:
    """Refused: exit 2, no traceback, one line on stderr that says ``text``."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("codity: ") and text in lines[0], lines


def _queue_with_jobs(url: str, name: str, jobs: int) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        queue = create_queue(conn, name)
        conn.execute(
            *enqueue_many_call(name, [{"task": "t", "payload": {"n": n}} for n in range(jobs)])
        )
    return queue


def _on_jobs_shards(
    conn: psycopg.Connection, query: str, table: str = "codity.jobs"
) -> list[tuple[Any, ...]]:
    """``(success, result)`` of ``query`` on every shard of ``table``, ``%s`` standing for
    the shard's name (``run_command_on_shards``, which formats it with format(): a
    literal % is written %%)."""
    rows = conn.execute(
        "SELECT success, result FROM pg_catalog.run_command_on_shards(%s, %s)", [table, query]
    )
    return list(rows.fetchall())


# -- idempotent, and complete on every node -----------------------------------------------------


def test_a_second_citus_migrate_changes_nothing_on_any_node(
    citus_cluster: CitusCluster, citus_db_url: str
) -> None:
    """The database as ``migrate(url, citus=True)`` left it (the template), with a queue and
    jobs on it; then the real ``codity migrate --citus`` again: the catalogue of every node,
    Citus's metadata and every row are as they were."""
    _queue_with_jobs(citus_db_url, "kept", 3)
    before = _catalogue(citus_cluster, citus_db_url)
    result = _codity(citus_db_url, "migrate", "--citus")
    assert result.returncode == 0, result.stderr
    assert "0 new migration(s)" in result.stdout and "distributed on Citus" in result.stdout
    after = _catalogue(citus_cluster, citus_db_url)
    assert _changes(before, after) == {}
    # And it is distributed as asked: the job tables by queue_id, the rest as reference tables.
    kinds = dict(after["citus tables"][i][:2] for i in range(len(after["citus tables"])))
    assert {t: kinds.get(f"codity.{t}") for t in citus_distribution.JOB_TABLES} == dict.fromkeys(
        citus_distribution.JOB_TABLES, "h"
    )
    assert {
        t: kinds.get(f"codity.{t}") for t in citus_distribution.REFERENCE_TABLES
    } == dict.fromkeys(citus_distribution.REFERENCE_TABLES, "n")


def test_every_codity_function_is_on_every_node_after_one_citus_migrate(
    citus_cluster: CitusCluster, citus_db_url: str
) -> None:
    """The bodies delegated to a worker node call codity's helpers there: each function of
    the coordinator's schema ``codity`` must exist, with the same source, on every node."""
    functions = citus_cluster.on_every_node(
        _dbname(citus_db_url),
        "SELECT p.oid::regprocedure::text, pg_catalog.md5(p.prosrc) FROM pg_catalog.pg_proc p"
        " WHERE p.pronamespace = 'codity'::regnamespace ORDER BY 1",
    )
    coordinator = functions[citus_cluster.coordinator.port]
    assert len(coordinator) > 50
    missing = {
        port: sorted({name for name, _ in coordinator} - {name for name, _ in rows})
        for port, rows in functions.items()
    }
    assert missing == {port: [] for port in functions}
    assert all(rows == coordinator for rows in functions.values())


# -- refused in one sentence, nothing changed ---------------------------------------------------

_CODITY_ROLES = "SELECT rolname::text, rolcanlogin FROM pg_catalog.pg_roles WHERE rolname = ANY(%s)"


def test_citus_migrate_on_a_server_without_citus_is_refused_in_one_sentence(
    db_url: str,
) -> None:
    """The suite's plain embedded server has no Citus: one line that says what to install,
    exit 2, no traceback."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        roles = conn.execute(_CODITY_ROLES, [list(citus_distribution.CLUSTER_ROLES)]).fetchall()
    try:
        result = _codity(db_url, "migrate", "--citus")
        _one_sentence(result, "Citus is not installed on this server")
    finally:
        # The roles are the whole server's: whatever the command did to them is undone, so
        # the plain tests that share the server still find their owner NOLOGIN.
        with psycopg.connect(db_url, autocommit=True) as conn:
            for role, could_login in roles:
                conn.execute(f"ALTER ROLE {role} {'LOGIN' if could_login else 'NOLOGIN'}")


def test_citus_migrate_refused_for_want_of_citus_leaves_the_roles_nologin(db_url: str) -> None:
    """Refused means nothing changed: on a server without Citus, the function owner stays
    NOLOGIN (docs/SECURITY.md); LOGIN is the cluster's need only."""
    roles = list(citus_distribution.CLUSTER_ROLES)
    with psycopg.connect(db_url, autocommit=True) as conn:
        before = conn.execute(_CODITY_ROLES, [roles]).fetchall()
    try:
        assert _codity(db_url, "migrate", "--citus").returncode == 2
        with psycopg.connect(db_url, autocommit=True) as conn:
            after = conn.execute(_CODITY_ROLES, [roles]).fetchall()
        assert ("codity_owner", False) in before
        assert after == before
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            for role, could_login in before:
                conn.execute(f"ALTER ROLE {role} {'LOGIN' if could_login else 'NOLOGIN'}")


@pytest.fixture
def bare_cluster_database(citus_cluster: CitusCluster) -> Any:
    """A database on every node with Citus and the worker nodes added, and nothing else."""
    name = f"codity_bare_{os.getpid()}_{os.urandom(4).hex()}"
    url = citus_cluster.create_database(name)
    try:
        yield name, url
    finally:
        citus_cluster.drop(name)


def _schemas(cluster: CitusCluster, database: str) -> dict[int, Rows]:
    return cluster.on_every_node(
        database,
        "SELECT n.nspname::text FROM pg_catalog.pg_namespace n WHERE n.nspname = 'codity'"
        " UNION ALL SELECT c.relname::text FROM pg_catalog.pg_class c"
        " WHERE c.relname = '_yoyo_migration'",
    )


def test_plain_migrate_on_a_coordinator_with_workers_is_refused_and_changes_nothing(
    citus_cluster: CitusCluster, bare_cluster_database: tuple[str, str]
) -> None:
    """Plain ``codity migrate`` would half-migrate a cluster (local tables on the
    coordinator): refused in one line naming the command to run, nothing created anywhere."""
    name, url = bare_cluster_database
    _one_sentence(_codity(url, "migrate"), "run codity migrate --citus")
    assert _schemas(citus_cluster, name) == {port: [] for port in _schemas(citus_cluster, name)}


def test_citus_migrate_on_a_worker_node_is_refused_in_one_sentence(
    citus_cluster: CitusCluster, bare_cluster_database: tuple[str, str]
) -> None:
    """DATABASE_URL pointed at a worker node by mistake: one line saying to use the
    coordinator, and nothing created on any node."""
    name, _ = bare_cluster_database
    on_worker = citus_cluster.workers[0].url(name)
    _one_sentence(_codity(on_worker, "migrate", "--citus"), "coordinator")
    assert _schemas(citus_cluster, name) == {port: [] for port in _schemas(citus_cluster, name)}


# -- a migration written after distribution -----------------------------------------------------

_MIGRATION_0099 = """\
-- A column and an index on a distributed job table, written after distribution.
ALTER TABLE codity.jobs ADD COLUMN label text;
CREATE INDEX jobs_label_idx ON codity.jobs (queue_id, label) WHERE label IS NOT NULL;
"""

_LABEL_BODY = """\
-- A by-queue body over the new column (the test's, in a temporary copy of sql/).
CREATE OR REPLACE FUNCTION codity.label_in_queue(p_queue_id bigint, p_job_id bigint, p_label text)
RETURNS TABLE (labelled_job bigint, labelled_count bigint)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
BEGIN
    UPDATE codity.jobs j SET label = p_label
    WHERE j.queue_id = p_queue_id AND j.id = p_job_id;
    RETURN QUERY
    SELECT p_job_id, count(*) FROM codity.jobs j
    WHERE j.queue_id = p_queue_id AND j.label = p_label;
END;
$$;
"""

_LABEL_SIGNATURE = "label_in_queue(bigint,bigint,text)"


def test_a_migration_after_distribution_reaches_every_shard_and_its_body_runs_delegated(
    citus_cluster: CitusCluster,
    citus_db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CODITY_SQL_DIR points at a copy of sql/ with migration 0099 (a column and a partial
    index on codity.jobs) and a function file for a new by-queue body, which the change also
    lists among codity.db.citus.BODIES (as a real change adding a body would). ``migrate``
    on the distributed database: every one of the shards of codity.jobs, on both worker
    nodes, has the column and the index; the body exists on every node and a call from the
    coordinator goes whole to the node of the queue, where it writes and reads the column."""
    copy = tmp_path / "sql"
    shutil.copytree(sql_dir(), copy)
    (copy / "migrations" / "0099_jobs_label.sql").write_text(_MIGRATION_0099)
    (copy / "functions" / "label_in_queue.sql").write_text(_LABEL_BODY)
    monkeypatch.setenv("CODITY_SQL_DIR", str(copy))
    monkeypatch.setattr(
        citus_distribution, "BODIES", (*citus_distribution.BODIES, _LABEL_SIGNATURE)
    )
    queue = _queue_with_jobs(citus_db_url, "labelled", 2)

    applied, _ = migrate(citus_db_url)  # plain migrate: the database is distributed already
    assert applied == 1
    database = _dbname(citus_db_url)
    with psycopg.connect(citus_db_url, autocommit=True) as conn:
        column = _on_jobs_shards(
            conn,
            "SELECT count(*) FROM pg_catalog.pg_attribute"
            " WHERE attrelid = '%s'::regclass AND attname = 'label' AND NOT attisdropped",
        )
        index = _on_jobs_shards(
            conn,
            "SELECT count(*) FROM pg_catalog.pg_index i"
            " JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = '%s'::regclass AND c.relname LIKE 'jobs_label_idx%%'",
        )
        shard_nodes = conn.execute(
            "SELECT count(DISTINCT nodeport) FROM pg_catalog.citus_shards"
            " WHERE table_name = 'codity.jobs'::regclass"
        ).fetchone()
        shards = conn.execute(
            "SELECT shard_count FROM public.citus_tables WHERE table_name = 'codity.jobs'::regclass"
        ).fetchone()
    assert shards == (8,), "two worker nodes get the default of four shards each, at least 8"
    assert len(column) == 8 and set(column) == {(True, "1")}, column
    assert len(index) == 8 and set(index) == {(True, "1")}, index
    assert shard_nodes == (2,)
    present = citus_cluster.on_every_node(
        database, "SELECT to_regprocedure(%s) IS NOT NULL", [f"codity.{_LABEL_SIGNATURE}"]
    )
    assert present == {port: [(True,)] for port in present}

    with psycopg.connect(citus_db_url, autocommit=True) as conn:
        job = conn.execute(
            "SELECT min(id) FROM codity.jobs WHERE queue_id = %s", [queue]
        ).fetchone()
        assert job is not None
        sent: list[tuple[str, str]] = []
        conn.add_notice_handler(
            lambda n: sent.append((n.message_primary or "", n.message_detail or ""))
        )
        conn.execute("SET citus.log_remote_commands = on")
        conn.execute("SET client_min_messages = log")
        answer = conn.execute(
            "SELECT labelled_job, labelled_count FROM codity.label_in_queue(%s, %s, 'urgent')",
            [queue, job[0]],
        ).fetchall()
        conn.execute("RESET citus.log_remote_commands")
        label = conn.execute(
            "SELECT label FROM codity.jobs WHERE queue_id = %s AND id = %s", [queue, job[0]]
        ).fetchone()
    assert answer == [(job[0], 1)]
    assert label == ("urgent",)
    node = citus_cluster.node_port_of(database, "codity.jobs", queue)
    assert len(sent) == 1, sent
    assert "codity.label_in_queue(" in sent[0][0] and f":{node} " in sent[0][1], sent


# -- migrations 0042 and later on a cluster distributed before them -----------------------------


def test_migrations_from_0042_reach_every_node_of_a_cluster_distributed_before_them(
    citus_cluster: CitusCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installation distributed at migration 0041 takes 0042 and 0043 with a plain
    ``migrate``: the tenant functions lose their SET clause on every node (the shards'
    policies run them there, per row), every shard of codity.jobs has the six indexes with
    the project carried and every shard of codity.dead_letters its queue index with it
    (0043), and a tenant's read through row-level security still finds its own jobs and
    none of another project's."""
    before = tmp_path / "sql"
    shutil.copytree(sql_dir(), before)
    for later in sorted((before / "migrations").glob("004[2-9]_*.sql")):
        later.unlink()
    monkeypatch.setenv("CODITY_SQL_DIR", str(before))
    name = f"codity_c0042_{os.getpid()}"
    url = citus_cluster.create_database(name)
    try:
        migrate(url, citus=True)
        queue = _queue_with_jobs(url, "upgraded", 3)
        monkeypatch.delenv("CODITY_SQL_DIR")
        applied, _ = migrate(url)
        assert applied == len(list((sql_dir() / "migrations").glob("004[2-9]_*.sql")))
        inlinable = citus_cluster.on_every_node(
            name,
            "SELECT count(*) FROM pg_catalog.pg_proc WHERE pronamespace = 'codity'::regnamespace"
            " AND proname IN ('current_project_id', 'current_org_id') AND proconfig IS NULL",
        )
        assert set(map(tuple, inlinable.values())) == {((2,),)}, inlinable
        with psycopg.connect(url, autocommit=True) as conn:
            carried = _on_jobs_shards(
                conn,
                "SELECT count(*) FROM pg_catalog.pg_index i"
                " WHERE i.indrelid = '%s'::regclass AND i.indnkeyatts < i.indnatts",
            )
            assert carried and set(carried) == {(True, "6")}, carried
            letters = _on_jobs_shards(
                conn,
                "SELECT count(*) FROM pg_catalog.pg_index i"
                " WHERE i.indrelid = '%s'::regclass AND i.indnkeyatts < i.indnatts",
                table="codity.dead_letters",
            )
            assert letters and set(letters) == {(True, "1")}, letters
            project = conn.execute("SELECT project_id FROM codity.queues WHERE id = %s", [queue])
            (project_id,) = project.fetchone() or (None,)
        with psycopg.connect(url) as conn:
            conn.execute("SELECT pg_catalog.set_config('role', 'codity_app', true)")
            conn.execute(f"SET LOCAL codity.project_id = '{project_id}'")
            mine = conn.execute("SELECT count(*) FROM codity.jobs WHERE queue_id = %s", [queue])
            assert mine.fetchone() == (3,)
            conn.execute(f"SET LOCAL codity.project_id = '{int(project_id) + 1000}'")
            other = conn.execute("SELECT count(*) FROM codity.jobs WHERE queue_id = %s", [queue])
            assert other.fetchone() == (0,)
    finally:
        citus_cluster.drop(name)
