"""Workflows and batches, read-only: a list with a derived state, one workflow with its nodes
and edges, and the workflow a job belongs to.

A workflow (``codity.workflows``, kind ``workflow``) is jobs with edges between them
(``codity.job_deps``); a batch (kind ``batch``) is members without edges and up to three
callbacks (jobs with node key ``all_done``, ``all_succeeded`` or ``any_dead``) that run after
every member. Nothing on the workflow row counts its progress (so a wide fan-out never
queues on one row): counts by status and the state are read from its jobs, through
``jobs_workflow_idx``, at the time of the read.

The state, from those counts (:func:`derive_state`):

- ``open``: a batch not sealed yet (it may still take members; its callbacks cannot run);
- ``completed``: every job completed;
- ``failed``: nothing unfinished, and a job dead-lettered or cancelled (in a batch: a member
  dead-lettered or cancelled, or a callback that failed; the ``any_dead`` callback cancelled
  because no member died is how a batch that went well ends);
- ``held``: unfinished, yet nothing can move: every unfinished job is ``waiting``, behind a
  parent that failed on a ``hold`` edge (or behind such a node), until an operator acts;
- ``running``: anything else.

Bounded reads. A list page reads at most ``LIST_SCAN_WORKFLOWS`` workflows and the jobs of
at most ``LIST_SCAN_JOBS`` nodes (always at least one workflow's, a batch's up to 100,003),
so with a state filter, or many large workflows, a page may hold fewer than ``limit`` rows
and still have a ``next_cursor``: keep following it. The detail answers at most
``max_nodes`` nodes (10,000 by default and at most: every workflow fits; a batch of more
members answers its callbacks first, then failed or cancelled members, then running ones,
then the rest, lowest id first) with ``nodes_truncated`` saying some were left out, and the
edges between the nodes answered, at most ``MAX_EDGES`` (``edges_truncated``); its counts
and state are always over every job. Every query filters by the project on top of row-level
security, so another project's workflow reads exactly like a missing one.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint, Reply
from codity.web.endpoints.jobs import JOB_STATUSES
from codity.web.fields import Strict
from codity.web.lookups import fetch_all, one_or_404, path_id
from codity.web.paging import decode_id_cursor, encode_id_cursor

__all__ = [
    "ACTIVE",
    "CALLBACK_KEYS",
    "LIST_SCAN_JOBS",
    "LIST_SCAN_WORKFLOWS",
    "MAX_EDGES",
    "MAX_NODES",
    "ROUTES",
    "STATES",
    "WorkflowState",
    "derive_state",
    "read_workflow",
]

WorkflowKind = Literal["workflow", "batch"]
WorkflowState = Literal["running", "held", "failed", "completed", "open"]
STATES: tuple[str, ...] = get_args(WorkflowState)

ACTIVE = ("scheduled", "queued", "claimed", "running", "failed")
"""Unfinished and able to move without an operator (``failed`` is retried or dead-lettered
in the transaction that fails it)."""
CALLBACK_KEYS = ("all_done", "all_succeeded", "any_dead")
"""A batch's callbacks, by node key, in the order they are shown."""

LIST_SCAN_WORKFLOWS = 1000
"""A list page reads at most this many workflows (with a state filter; else ``limit``)."""
LIST_SCAN_JOBS = 200_000
"""A list page counts the jobs of at most this many nodes (but always one workflow's)."""
MAX_NODES = 10_000
"""The detail's most nodes, and its default: a workflow's limit, so every workflow fits."""
MAX_EDGES = 50_000
"""The detail's most edges: a workflow's limit."""

# ---------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------


class WorkflowListQuery(Strict):
    kind: WorkflowKind | None = None
    state: WorkflowState | None = None
    limit: int = Field(50, ge=1, le=200)
    cursor: str | None = Field(None, max_length=64)


class WorkflowQuery(Strict):
    max_nodes: int = Field(
        MAX_NODES,
        ge=1,
        le=MAX_NODES,
        description="answer at most this many nodes (callbacks, then failed, then running "
        "nodes first); nodes_truncated says when some were left out",
    )


class StatusCounts(BaseModel):
    """How many jobs are in each status."""

    waiting: int = 0
    scheduled: int = 0
    queued: int = 0
    claimed: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    dead_letter: int = 0
    cancelled: int = 0


class Callback(BaseModel):
    node_key: str
    job_id: int
    status: str


class WorkflowSummary(BaseModel):
    id: int
    kind: WorkflowKind
    name: str | None
    idempotency_key: str | None
    created_at: dt.datetime
    sealed_at: dt.datetime | None
    """A batch: when it was sealed (null: open). A workflow: when it was enqueued."""
    node_count: int
    edge_count: int
    state: WorkflowState
    counts: StatusCounts
    """Every job of it: a workflow's nodes; a batch's members and callbacks."""
    member_counts: StatusCounts | None
    """A batch: its members only (callbacks left out); null for a workflow."""
    callbacks: list[Callback]
    """A batch's callbacks (all_done, all_succeeded, any_dead) and their status; a workflow: []."""


class WorkflowNode(BaseModel):
    id: int
    """The job's id."""
    node_key: str | None
    """Null for a batch member."""
    queue: str
    task: str
    status: str
    attempt: int
    max_attempts: int
    deps_remaining: int | None
    depth: int
    """The longest path to it from a node without parents (0 for those)."""
    finished_at: dt.datetime | None


class WorkflowEdge(BaseModel):
    parent_id: int
    child_id: int
    on_failure: str
    """What the parent's dead letter or cancel does to the child: cancel, ignore, hold or run."""
    resolved: str | None
    """The parent's outcome (completed, dead_letter, cancelled) once it settled."""
    resolved_at: dt.datetime | None


class WorkflowDetail(WorkflowSummary):
    max_nodes: int
    nodes_truncated: bool
    edges_truncated: bool
    nodes: list[WorkflowNode]
    """In (depth, id) order."""
    edges: list[WorkflowEdge]
    """The edges between the nodes answered, in (parent, child) order."""


class JobWorkflowRef(BaseModel):
    id: int
    kind: WorkflowKind
    name: str | None
    node_key: str | None
    """Null for a batch member."""


class JobWorkflow(BaseModel):
    job_id: int
    workflow: JobWorkflowRef | None
    """Null when the job is a plain job."""


# ---------------------------------------------------------------------------------------
# The state
# ---------------------------------------------------------------------------------------


def derive_state(
    kind: str,
    sealed_at: Any,
    counts: dict[str, int],
    callbacks: list[dict[str, Any]] | None = None,
) -> str:
    """The state of a workflow (or batch) from the counts of its jobs by status (every job,
    callbacks included) and, for a batch, its callbacks."""
    if kind == "batch" and sealed_at is None:
        return "open"
    active = sum(counts.get(s, 0) for s in ACTIVE)
    if active + counts.get("waiting", 0) > 0:
        return "running" if active else "held"
    dead, cancelled = counts.get("dead_letter", 0), counts.get("cancelled", 0)
    if kind == "batch":
        # A callback that did not apply is cancelled by design (any_dead when none died).
        cancelled -= sum(
            1 for c in callbacks or () if c["status"] == "cancelled" and c["node_key"] == "any_dead"
        )
    return "failed" if dead + cancelled > 0 else "completed"


# ---------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------

_WORKFLOW_COLUMNS = """
SELECT w.id, w.kind, w.name, w.idempotency_key, w.created_at, w.sealed_at,
       w.nodes AS node_count, w.edges AS edge_count
"""

# Newest first, with the running total of their nodes (the jobs the counts will read).
_CANDIDATES = (
    _WORKFLOW_COLUMNS
    + """,
       sum(w.nodes) OVER (ORDER BY w.id DESC ROWS UNBOUNDED PRECEDING) AS nodes_so_far
FROM codity.workflows w
WHERE w.project_id = %(project_id)s
  AND (%(kind)s::text IS NULL OR w.kind = %(kind)s::text)
  AND (%(cursor)s::bigint IS NULL OR w.id < %(cursor)s::bigint)
ORDER BY w.id DESC
LIMIT %(scan)s
"""
)

_ONE = (
    _WORKFLOW_COLUMNS
    + """
FROM codity.workflows w
WHERE w.project_id = %(project_id)s AND w.id = %(workflow_id)s
"""
)

# The jobs of some workflows by status; a batch's callbacks one by one (callback is NULL for
# members and for a workflow's nodes). One probe of jobs_workflow_idx per workflow.
_COUNTS = """
SELECT j.workflow_id, j.status::text AS status,
       CASE WHEN w.kind = 'batch' THEN j.node_key END AS callback,
       count(*)::integer AS n, min(j.id) AS job_id
FROM codity.workflows w
JOIN codity.jobs j ON j.workflow_id = w.id AND j.project_id = w.project_id
WHERE w.project_id = %(project_id)s AND w.id = ANY(%(ids)s::bigint[])
GROUP BY j.workflow_id, j.status, 3
"""

# The nodes answered: a batch's callbacks first, then what failed, then what runs, then the
# rest, lowest id first (a workflow's nodes all fit unless max_nodes is lowered).
_NODES = """
WITH n AS MATERIALIZED (
    SELECT j.id, j.queue_id, j.node_key, j.task, j.status, j.attempt, j.max_attempts,
           j.deps_remaining, j.finished_at
    FROM codity.jobs j
    WHERE j.workflow_id = %(workflow_id)s AND j.project_id = %(project_id)s
    ORDER BY j.node_key IS NULL,
             CASE WHEN j.status IN ('dead_letter', 'cancelled', 'failed') THEN 0
                  WHEN j.status IN ('claimed', 'running') THEN 1
                  ELSE 2 END,
             j.id
    LIMIT %(max_nodes)s
)
SELECT n.id, n.queue_id, n.node_key, q.name AS queue, n.task, n.status::text AS status,
       n.attempt, n.max_attempts, n.deps_remaining, n.finished_at
FROM n
JOIN codity.queues q ON q.id = n.queue_id AND q.project_id = %(project_id)s
"""

# Each answered node's depth, from the edges into it (a node without any: 0), by
# job_deps_child_idx. A query of its own, not a lateral join in the one above: Citus plans
# no lateral outer join of a distributed subquery that reads a reference table.
_DEPTHS = """
SELECT e.child_id AS id, max(e.child_depth) AS depth
FROM codity.job_deps e
WHERE e.child_queue_id = ANY(%(queue_ids)s::bigint[]) AND e.child_id = ANY(%(ids)s::bigint[])
  AND e.project_id = %(project_id)s AND e.workflow_id = %(workflow_id)s
GROUP BY e.child_id
"""

# The edges out of the nodes answered, by job_deps' key (it leads with the parent); those to
# a node not answered are left out by the caller (an IN over the same node list here would
# be planned as a nested loop when the statistics have not seen a new workflow yet).
_EDGES = """
SELECT e.parent_id, e.child_id, e.on_failure, e.resolved, e.resolved_at
FROM unnest(%(queue_ids)s::bigint[], %(ids)s::bigint[]) AS n(queue_id, id)
JOIN codity.job_deps e ON e.queue_id = n.queue_id AND e.parent_id = n.id
WHERE e.project_id = %(project_id)s AND e.workflow_id = %(workflow_id)s
ORDER BY e.parent_id, e.child_id
LIMIT %(fetch)s
"""

_JOB = """
SELECT j.id AS job_id, w.id, w.kind, w.name, j.node_key
FROM codity.jobs j
LEFT JOIN codity.workflows w ON w.id = j.workflow_id AND w.project_id = j.project_id
WHERE j.project_id = %(project_id)s AND j.id = %(job_id)s
"""


async def _with_counts(call: Call[Any, Any], workflows: list[dict[str, Any]]) -> None:
    """Give each workflow its counts, callbacks and state (in place)."""
    if not workflows:
        return
    rows = await fetch_all(
        call, _COUNTS, {"project_id": call.project_id, "ids": [w["id"] for w in workflows]}
    )
    by_id = {w["id"]: w for w in workflows}
    for w in workflows:
        w["counts"] = dict.fromkeys(JOB_STATUSES, 0)
        w["member_counts"] = dict.fromkeys(JOB_STATUSES, 0) if w["kind"] == "batch" else None
        w["callbacks"] = []
    for r in rows:
        w = by_id[r["workflow_id"]]
        w["counts"][r["status"]] += r["n"]
        if r["callback"] is not None:
            w["callbacks"].append(
                {"node_key": r["callback"], "job_id": r["job_id"], "status": r["status"]}
            )
        elif w["member_counts"] is not None:
            w["member_counts"][r["status"]] += r["n"]
    for w in workflows:
        w["callbacks"].sort(
            key=lambda c: (
                CALLBACK_KEYS.index(c["node_key"])
                if c["node_key"] in CALLBACK_KEYS
                else len(CALLBACK_KEYS),
                c["job_id"],
            )
        )
        w["state"] = derive_state(w["kind"], w["sealed_at"], w["counts"], w["callbacks"])


# ---------------------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------------------


async def list_workflows(call: Call[None, WorkflowListQuery]) -> Reply:
    query = call.query
    scan = LIST_SCAN_WORKFLOWS if query.state else query.limit
    found = await fetch_all(
        call,
        _CANDIDATES,
        {
            "project_id": call.project_id,
            "kind": query.kind,
            "cursor": decode_id_cursor(query.cursor),
            "scan": scan + 1,
        },
    )
    # The workflows this page reads: up to the scan, and the jobs of at most LIST_SCAN_JOBS
    # nodes (the first workflow always, however large).
    window = [
        w for i, w in enumerate(found[:scan]) if i == 0 or w["nodes_so_far"] <= LIST_SCAN_JOBS
    ]
    more_beyond = len(found) > len(window)
    await _with_counts(call, window)
    rows = [w for w in window if query.state is None or w["state"] == query.state]
    if len(rows) > query.limit:
        del rows[query.limit :]
        next_cursor: str | None = encode_id_cursor(rows[-1]["id"])
    elif more_beyond:
        next_cursor = encode_id_cursor(window[-1]["id"])
    else:
        next_cursor = None
    return Reply(rows, meta={"next_cursor": next_cursor, "limit": query.limit})


async def get_workflow(call: Call[None, WorkflowQuery]) -> dict[str, Any]:
    workflow_id = path_id(call, "workflow_id", "workflow")
    return await read_workflow(call, workflow_id, call.query.max_nodes)


async def read_workflow(call: Call[Any, Any], workflow_id: int, max_nodes: int) -> dict[str, Any]:
    """A workflow or batch of the caller's project as :class:`WorkflowDetail` has it (404
    when there is none): also the answer of the workflow actions (``workflow_actions``)."""
    keys = {"project_id": call.project_id, "workflow_id": workflow_id}
    workflow = await one_or_404(call, _ONE, keys, "workflow")
    await _with_counts(call, [workflow])
    nodes = await fetch_all(call, _NODES, {**keys, "max_nodes": max_nodes})
    answered_keys = {
        **keys,
        "queue_ids": [n["queue_id"] for n in nodes],
        "ids": [n["id"] for n in nodes],
    }
    depths = {r["id"]: r["depth"] for r in await fetch_all(call, _DEPTHS, answered_keys)}
    for n in nodes:
        n["depth"] = depths.get(n["id"], 0)
    nodes.sort(key=lambda n: (n["depth"], n["id"]))
    edges = await fetch_all(call, _EDGES, {**answered_keys, "fetch": MAX_EDGES + 1})
    answered = {n["id"] for n in nodes}
    edges = [e for e in edges if e["child_id"] in answered]
    workflow["max_nodes"] = max_nodes
    workflow["nodes_truncated"] = sum(workflow["counts"].values()) > len(nodes)
    workflow["edges_truncated"] = len(edges) > MAX_EDGES
    workflow["nodes"] = nodes
    workflow["edges"] = edges[:MAX_EDGES]
    return workflow


async def get_job_workflow(call: Call[None, None]) -> dict[str, Any]:
    job_id = path_id(call, "job_id", "job")
    found = await one_or_404(call, _JOB, {"project_id": call.project_id, "job_id": job_id}, "job")
    workflow = None
    if found["id"] is not None:
        workflow = {k: found[k] for k in ("id", "kind", "name", "node_key")}
    return {"job_id": found["job_id"], "workflow": workflow}


ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/workflows",
        Scope.PROJECT,
        list_workflows,
        "List workflows and batches, newest first, with counts by job status and a derived "
        "state; keyset pages that read a bounded number of jobs",
        "workflows",
        min_role=Role.VIEWER,
        query=WorkflowListQuery,
        response=WorkflowSummary,
        many=True,
        errors=(422,),
    ),
    Endpoint(
        "GET",
        "/api/v1/workflows/{workflow_id:int}",
        Scope.PROJECT,
        get_workflow,
        "Get a workflow or batch with its nodes (at most max_nodes, nodes_truncated when more) "
        "and the edges between them",
        "workflows",
        min_role=Role.VIEWER,
        query=WorkflowQuery,
        response=WorkflowDetail,
        errors=(404, 422),
    ),
    Endpoint(
        "GET",
        "/api/v1/jobs/{job_id:int}/workflow",
        Scope.PROJECT,
        get_job_workflow,
        "The workflow or batch a job belongs to and its node key (null for a plain job)",
        "workflows",
        min_role=Role.VIEWER,
        response=JobWorkflow,
        errors=(404,),
    ),
]
