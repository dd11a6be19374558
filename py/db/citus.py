"""``codity migrate --citus``: Codity's tables and hot functions spread over a Citus cluster.

Run on the coordinator, after the migrations and the function files, in one transaction, and
idempotent: what is distributed already is left as it is, so the same command upgrades a
cluster (``codity migrate`` on a distributed database runs this step too; a new table a later
migration adds must be classified below, or the step refuses to guess).

What goes where (docs/DESIGN_DECISIONS.md 61):

- **Job tables** (:data:`JOB_TABLES`) are hash-distributed by ``queue_id`` and colocated
  with ``codity.jobs``: a queue's jobs, executions, dead letters, minute counts, totals,
  limiter row, the workflow edges out of its jobs and its jobs' workflow settlements not
  folded yet (``workflow_events``, DESIGN_DECISIONS 73) live in one shard group on one node.
- **Small tables** (:data:`REFERENCE_TABLES`) are reference tables, a copy on every node,
  so a body delegated to a worker node reads the queue, the worker and the project locally.
  Referenced tables come first: a reference table created before the tables that point at
  it would silently turn them into Citus local tables, which the identity column on
  ``jobs.id`` then makes impossible to distribute or undo. The one distributing transaction
  also turns ``citus.enable_local_reference_table_foreign_keys`` off for the same reason.
- **The by-queue bodies** (:data:`BODIES`) are distributed functions whose first argument,
  the queue's id, is the distribution argument, colocated with the jobs: Citus sends a call
  ``SELECT ... FROM codity.claim_in_queue(3, ...)`` whole to the node holding queue 3, where
  every statement of the body reads and writes local shards.
- **The rate limiter's buckets** (:data:`COORDINATOR_TABLES`) stay a plain table of the
  coordinator, where the web app alone writes them.

Logins: Citus opens its connections between nodes as the *current role*, so the function
owner ``codity_owner`` and the three API roles must be able to log in on every node (a
NOLOGIN owner refuses every function creation and every SECURITY DEFINER call that reaches a
shard). This step grants LOGIN to them; pg_hba.conf confines them to the cluster's own
addresses (docs/RUNBOOK.md, "Running on Citus"; docs/SECURITY.md). It also makes the
database propagate ``SET LOCAL`` to the nodes (``citus.propagate_set_commands = 'local'``),
which carries the web app's tenant settings to the shards, where row-level security reads
them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
from psycopg import sql

__all__ = [
    "BODIES",
    "CLUSTER_RESETS",
    "CLUSTER_ROLES",
    "COORDINATOR_TABLES",
    "JOB_TABLES",
    "REFERENCE_TABLES",
    "SUPPORTED_MAJOR",
    "CitusError",
    "DistributionReport",
    "adjust_functions",
    "check_cluster",
    "citus_version",
    "default_shard_count",
    "distribute",
    "is_distributed",
    "refuse_worker_node",
]

log = logging.getLogger(__name__)

SUPPORTED_MAJOR = (14,)
"""Citus major versions this code was tested on (tests/test_citus*.py, 14.0.1)."""

# Referenced before referencing: the order create_reference_table must see them in.
REFERENCE_TABLES = (
    "orgs",
    "users",
    "memberships",
    "projects",
    "api_keys",
    "refresh_tokens",
    "queues",
    "workers",
    "scheduled_jobs",
    "fence_rejections",
    "fence_rejection_totals",
    "job_transitions",
    "settings",
    "rollup_state",
    "workflows",
)

# Left as plain tables of the coordinator, outside Citus: written on every rate-limited API
# request by codity.rate_limit_hit and read by nothing else, which runs only in the web app's
# transactions on the coordinator. A reference table would make each of those writes a
# two-phase commit on every node.
COORDINATOR_TABLES = ("rate_limit_buckets",)

# Distributed by queue_id, colocated with codity.jobs (the first).
JOB_TABLES = (
    "jobs",
    "job_executions",
    "dead_letters",
    "queue_minutes",
    "queue_totals",
    "queue_limiters",
    "job_deps",
    "workflow_events",
)

# The bodies by queue id (DESIGN.md, "Room to scale out", rule 1): their first argument is
# the queue's id, the distribution argument.
BODIES = (
    "claim_in_queue(bigint,bigint,integer,boolean,boolean,timestamp with time zone)",
    "start_many_in_queue(bigint,bigint[],integer[],timestamp with time zone)",
    "complete_many_in_queue(bigint,bigint[],integer[],jsonb[],timestamp with time zone,boolean,"
    "integer[])",
    "fail_in_queue(bigint,bigint,integer,text,boolean,timestamp with time zone,integer)",
    "release_in_queue(bigint,bigint,integer,timestamp with time zone)",
    "release_lost_claims_in_queue(bigint,bigint,bigint[],timestamp with time zone)",
    "extend_leases(bigint,bigint,bigint[],integer[],timestamp with time zone)",
    "reap_in_queue(bigint,timestamp with time zone,integer)",
    "enqueue_in_queue(bigint,text,jsonb,timestamp with time zone,integer,text,integer,"
    "timestamp with time zone)",
    "enqueue_many_in_queue(bigint,jsonb,timestamp with time zone)",
)

# What a function file sets that Citus cannot plan, taken back after every apply of the
# files (CREATE OR REPLACE restores it). The claim's generic plan (a session-long plan with
# the queue id as a parameter) is refused on a distributed table: "could not create
# distributed plan". Citus plans a router statement with its values cheaply, which is what
# force_generic_plan saved on one server (docs/DESIGN_DECISIONS.md 61).
CLUSTER_RESETS = (
    (
        "claim_in_queue(bigint,bigint,integer,boolean,boolean,timestamp with time zone)",
        "plan_cache_mode",
    ),
)

# Roles Citus connects between nodes as: the owner of every SECURITY DEFINER function, and
# the roles callers act as (SET ROLE codity_app in the web app; a login granted
# codity_worker connects as itself, which must be able to log in anyway).
CLUSTER_ROLES = ("codity_owner", "codity_app", "codity_worker", "codity_readonly", "codity_clock")


class CitusError(RuntimeError):
    """The database cannot be distributed as asked; the message says why in one sentence."""


@dataclass(frozen=True, slots=True)
class DistributionReport:
    reference_tables: int
    job_tables: int
    bodies: int
    citus: str
    newly_distributed: bool
    """True when this call distributed a table that was local before."""


def citus_version(conn: psycopg.Connection) -> str | None:
    """The Citus extension's version in this database, or None when it is not installed."""
    row = conn.execute(
        "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'citus'"
    ).fetchone()
    return None if row is None else str(row[0])


def is_distributed(conn: psycopg.Connection) -> bool:
    """True when this database is a Citus coordinator on which codity.jobs is distributed."""
    if citus_version(conn) is None:
        return False
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition"
        " WHERE logicalrelid = to_regclass('codity.jobs'))"
    ).fetchone()
    return bool(row and row[0])


def refuse_worker_node(conn: psycopg.Connection) -> None:
    """CitusError when this server is a Citus worker node: Codity is migrated, and every
    process connects, through the coordinator only."""
    if citus_version(conn) is None:
        return
    row = conn.execute("SELECT groupid FROM pg_catalog.pg_dist_local_group").fetchone()
    if row is not None and int(row[0]) != 0:
        raise CitusError(
            "this server is a Citus worker node: point DATABASE_URL at the coordinator,"
            " which creates and changes Codity on every node"
        )


def check_cluster(conn: psycopg.Connection) -> str:
    """The Citus version, or CitusError saying in one sentence why this database cannot be
    distributed (no Citus, another major version, not the coordinator). Changes nothing:
    ``migrate(..., citus=True)`` asks before it writes anything."""
    return _check_cluster(conn)


def _check_cluster(conn: psycopg.Connection) -> str:
    version = citus_version(conn)
    if version is None:
        available = conn.execute(
            "SELECT default_version FROM pg_catalog.pg_available_extensions WHERE name = 'citus'"
        ).fetchone()
        if available is None:
            raise CitusError(
                "Citus is not installed on this server: install Citus 14 on every node"
                " (Citus's packages or images), add citus to shared_preload_libraries,"
                " and run CREATE EXTENSION citus in this database on every node"
            )
        raise CitusError(
            "the citus extension is not created in this database: run CREATE EXTENSION citus"
            " here and on every worker node, and add the workers with citus_add_node"
        )
    major = int(version.split(".")[0])
    if major not in SUPPORTED_MAJOR:
        raise CitusError(
            f"Citus {version} is not supported: Codity runs on Citus"
            f" {', '.join(f'{m}.x' for m in SUPPORTED_MAJOR)} (tested on 14.0.1)"
        )
    refuse_worker_node(conn)
    row = conn.execute("SELECT citus_is_coordinator()").fetchone()
    if not (row and row[0]):
        raise CitusError(
            "this server is not the Citus coordinator: point DATABASE_URL at the coordinator"
            " (after SELECT citus_set_coordinator_host(...) there)"
        )
    return version


def _unclassified_tables(conn: psycopg.Connection) -> list[str]:
    known = {*REFERENCE_TABLES, *JOB_TABLES, *COORDINATOR_TABLES}
    rows = conn.execute(
        "SELECT c.relname FROM pg_catalog.pg_class c"
        " WHERE c.relnamespace = 'codity'::regnamespace AND c.relkind IN ('r', 'p')"
        " ORDER BY 1"
    ).fetchall()
    return [name for (name,) in rows if name not in known]


def _distributed_tables(conn: psycopg.Connection) -> dict[str, str]:
    """codity's tables known to Citus, by name, with their kind ('n' none = reference,
    'h' hash = distributed)."""
    rows = conn.execute(
        "SELECT c.relname, p.partmethod FROM pg_catalog.pg_dist_partition p"
        " JOIN pg_catalog.pg_class c ON c.oid = p.logicalrelid"
        " WHERE c.relnamespace = 'codity'::regnamespace"
    ).fetchall()
    return {str(name): str(method) for name, method in rows}


def _distributed_bodies(conn: psycopg.Connection) -> set[str]:
    rows = conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_catalog.pg_dist_object o"
        " JOIN pg_catalog.pg_proc p ON o.classid = 'pg_catalog.pg_proc'::regclass"
        "  AND o.objid = p.oid"
        " WHERE p.pronamespace = 'codity'::regnamespace"
        "   AND o.distribution_argument_index IS NOT NULL"
    ).fetchall()
    return {str(name).removeprefix("codity.").replace(", ", ",") for (name,) in rows}


def grant_logins(conn: psycopg.Connection) -> None:
    """LOGIN for the roles Citus connects between nodes as (the module's docstring).
    Citus propagates ALTER ROLE to every node."""
    for role in CLUSTER_ROLES:
        row = conn.execute(
            "SELECT rolcanlogin FROM pg_catalog.pg_roles WHERE rolname = %s", [role]
        ).fetchone()
        if row is not None and not row[0]:
            conn.execute(sql.SQL("ALTER ROLE {} LOGIN").format(sql.Identifier(role)))


def adjust_functions(conn: psycopg.Connection) -> None:
    """Take back what the function files set that Citus cannot plan (CLUSTER_RESETS), in the
    transaction that applied the files, so no claim ever runs with them in between.
    ALTER FUNCTION reaches every node."""
    for function, setting in CLUSTER_RESETS:
        conn.execute(
            sql.SQL("ALTER FUNCTION {} RESET {}").format(
                sql.SQL("codity." + function), sql.Identifier(setting)
            )
        )


def default_shard_count(conn: psycopg.Connection) -> int:
    """Four shards per worker node, at least eight (DESIGN_DECISIONS 61): every queue lives
    in one shard, so the hot path does not care; what does is each read across queues (the
    scheduler's tick, the dashboard), one task per shard. Four per node leaves room to grow
    to four times the nodes by moving shard groups; past that, Citus splits shards online."""
    row = conn.execute(
        "SELECT count(*) FROM pg_catalog.pg_dist_node"
        " WHERE noderole = 'primary' AND groupid <> 0 AND shouldhaveshards"
    ).fetchone()
    return max(8, 4 * (int(row[0]) if row else 0))


def distribute(conn: psycopg.Connection, *, shards: int | None = None) -> DistributionReport:
    """Distribute what is not distributed yet (the module's docstring); idempotent.

    ``conn`` is an autocommit connection to the coordinator as a superuser, after the
    migrations and the function files have been applied.
    """
    version = _check_cluster(conn)
    unclassified = _unclassified_tables(conn)
    if unclassified:
        raise CitusError(
            f"table(s) {', '.join('codity.' + t for t in unclassified)} are neither job tables"
            " nor reference tables: classify them in codity.db.citus before distributing"
        )
    done = _distributed_tables(conn)
    wrong = [t for t in REFERENCE_TABLES if done.get(t, "n") != "n"] + [
        t for t in JOB_TABLES if done.get(t, "h") != "h"
    ]
    if wrong:
        raise CitusError(
            f"table(s) {', '.join('codity.' + t for t in wrong)} were distributed another"
            " way by hand: undistribute them (undistribute_table) and run this again"
        )
    bodies_done = _distributed_bodies(conn)
    with conn.transaction():
        for table in COORDINATOR_TABLES:
            if table in done:  # distributed by an earlier version of this step
                conn.execute("SELECT undistribute_table(%s)", [f"codity.{table}"])
        conn.execute("SET LOCAL citus.enable_local_reference_table_foreign_keys = off")
        # Every shard of the job tables is created in this transaction over one
        # connection per node, so the foreign keys between them see each other.
        conn.execute("SET LOCAL citus.multi_shard_modify_mode = 'sequential'")
        if any(t not in done for t in JOB_TABLES):
            # Read by the first distribution of the job tables only; later runs keep theirs.
            count = shards if shards is not None else default_shard_count(conn)
            conn.execute(
                "SELECT pg_catalog.set_config('citus.shard_count', %s, true)", [str(count)]
            )
        for table in REFERENCE_TABLES:
            if table not in done:
                conn.execute("SELECT create_reference_table(%s)", [f"codity.{table}"])
        for table in JOB_TABLES:
            if table not in done:
                colocate = "default" if table == JOB_TABLES[0] else f"codity.{JOB_TABLES[0]}"
                conn.execute(
                    "SELECT create_distributed_table(%s, 'queue_id', colocate_with => %s)",
                    [f"codity.{table}", colocate],
                )
        for body in BODIES:
            if body not in bodies_done:
                conn.execute(
                    "SELECT create_distributed_function(%s::regprocedure, '$1',"
                    " colocate_with => 'codity.jobs')",
                    [f"codity.{body}"],
                )
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET citus.propagate_set_commands = 'local'").format(
                sql.Identifier(conn.info.dbname)
            )
        )
    report = DistributionReport(
        reference_tables=len(REFERENCE_TABLES),
        job_tables=len(JOB_TABLES),
        bodies=len(BODIES),
        citus=version,
        newly_distributed=any(t not in done for t in (*REFERENCE_TABLES, *JOB_TABLES)),
    )
    log.info(
        "distributed on Citus %s: %d reference tables, %d job tables, %d bodies",
        version,
        report.reference_tables,
        report.job_tables,
        report.bodies,
    )
    return report
