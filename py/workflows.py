"""Workflows and batches from Python: small builders that emit the SQL API's JSON.

The database does every check and all the work (``codity.enqueue_workflow``,
``codity.create_batch``, ``codity.add_to_batch``, ``codity.seal_batch``); these classes only
spell the spec, so a graph built here is the same JSON a psql user or the REST API sends::

    flow = Workflow("thumbnails")
    fetch = flow.node("fetch", fetch_task, {"url": url})          # a Task: its name, its queue
    resize = flow.node("resize", "img.resize", queue="images")    # or a task name and a queue
    flow.node("publish", "img.publish", queue="images", after=[fetch, resize.ignoring()])
    nodes = flow.enqueue(conn)      # {"fetch": EnqueuedNode(job_id=..., status="queued"), ...}

    batch = Batch("import", on_all_done=Callback("import.report", queue="imports"))
    for row in rows:
        batch.job("import.row", {"row": row}, queue="imports")
    created = batch.enqueue(conn)   # its id, its members' job ids, its callbacks'

Keys are checked here as they are added (a duplicate key, an edge to a node of another
workflow: ``ValueError`` at once, where the mistake is); shape, limits, cycles and queues
are the database's to check, with its SQLSTATEs (``codity.db.errors``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from codity.worker.registry import Task

__all__ = [
    "Batch",
    "Callback",
    "CreatedBatch",
    "Edge",
    "EnqueuedNode",
    "Node",
    "Workflow",
    "add_to_batch",
    "seal_batch",
]

OnFailure = Literal["cancel", "ignore", "hold", "run"]
Conn = psycopg.Connection[Any]


def _job_fields(
    task: Task | str,
    payload: Any,
    queue: str | None,
    run_at: datetime | None,
    priority: int | None,
    max_attempts: int | None,
) -> dict[str, Any]:
    """A job object of the SQL API: task, queue, and only the options given."""
    name = task.name if isinstance(task, Task) else task
    target = queue or (task.queue if isinstance(task, Task) else None)
    if target is None:
        raise ValueError(f"task {name!r} has no default queue; pass queue=")
    job: dict[str, Any] = {"queue": target, "task": name}
    if payload is not None:
        job["payload"] = payload
    if run_at is not None:
        job["run_at"] = run_at.isoformat()
    if priority is not None:
        job["priority"] = priority
    if max_attempts is not None:
        job["max_attempts"] = max_attempts
    return job


@dataclass(frozen=True)
class Edge:
    """'Run after ``node``', with what its failure does to the child (docs/SQL_API.md,
    enqueue_workflow)."""

    node: Node
    on_failure: OnFailure

    def spec(self) -> dict[str, str]:
        return {"key": self.node.key, "on_failure": self.on_failure}


@dataclass(frozen=True)
class Node:
    """A node of a workflow: a job and the nodes it runs after."""

    workflow: Workflow = field(repr=False, compare=False)
    key: str
    job: Mapping[str, Any]
    after: tuple[Node | Edge, ...] = ()

    def ignoring(self) -> Edge:
        """An edge whose failure counts as done: the child runs anyway."""
        return Edge(self, "ignore")

    def holding(self) -> Edge:
        """An edge whose failure holds the child waiting for an operator."""
        return Edge(self, "hold")

    def on_death(self) -> Edge:
        """An edge on which the child runs only if this node is dead-lettered."""
        return Edge(self, "run")

    def spec(self) -> dict[str, Any]:
        node = {"key": self.key, **self.job}
        if self.after:
            node["after"] = [a.spec() if isinstance(a, Edge) else a.key for a in self.after]
        return node


@dataclass(frozen=True)
class EnqueuedNode:
    job_id: int
    queue_id: int
    status: str
    is_new: bool


@dataclass
class Workflow:
    """A graph of jobs, enqueued whole by one call (``codity.enqueue_workflow``)."""

    name: str | None = None
    idempotency_key: str | None = None
    on_failure: Literal["cancel", "ignore", "hold"] | None = None
    nodes: dict[str, Node] = field(default_factory=dict)

    def node(
        self,
        key: str,
        task: Task | str,
        payload: Any = None,
        *,
        queue: str | None = None,
        after: Iterable[Node | Edge] = (),
        run_at: datetime | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
    ) -> Node:
        """Add a node that runs after ``after`` (nodes of this workflow, or their edges)."""
        if key in self.nodes:
            raise ValueError(f"node key {key!r} is given twice")
        parents = tuple(after)
        for parent in parents:
            target = parent.node if isinstance(parent, Edge) else parent
            if self.nodes.get(target.key) is not target:
                raise ValueError(
                    f"node {key!r} runs after {target.key!r}, not a node of this workflow"
                )
        job = _job_fields(task, payload, queue, run_at, priority, max_attempts)
        added = Node(self, key, job, parents)
        self.nodes[key] = added
        return added

    def spec(self) -> dict[str, Any]:
        """The JSON ``codity.enqueue_workflow`` takes (and ``POST /api/v1/workflows``)."""
        spec: dict[str, Any] = {"nodes": [n.spec() for n in self.nodes.values()]}
        for name, value in (
            ("name", self.name),
            ("idempotency_key", self.idempotency_key),
            ("on_failure", self.on_failure),
        ):
            if value is not None:
                spec[name] = value
        return spec

    def enqueue(self, conn: Conn, *, project_id: int | None = None) -> dict[str, EnqueuedNode]:
        """Enqueue the graph in one call, all or nothing; its nodes by key. With an
        idempotency key seen before, that workflow's nodes (``is_new`` false)."""
        rows = conn.execute(
            "SELECT node_key, job_id, queue_id, job_status::text, is_new"
            " FROM codity.enqueue_workflow(%s, %s)",
            [Jsonb(self.spec()), project_id],
        ).fetchall()
        return {str(k): EnqueuedNode(int(j), int(q), str(s), bool(n)) for k, j, q, s, n in rows}


@dataclass(frozen=True)
class Callback:
    """A job a batch runs when its members are done (``on_all_done``), all completed
    (``on_all_succeeded``) or one is dead-lettered (``on_any_dead``)."""

    task: Task | str
    payload: Any = None
    queue: str | None = None
    run_at: datetime | None = None
    priority: int | None = None
    max_attempts: int | None = None

    def spec(self) -> dict[str, Any]:
        return _job_fields(
            self.task, self.payload, self.queue, self.run_at, self.priority, self.max_attempts
        )


@dataclass(frozen=True)
class CreatedBatch:
    batch_id: int
    members: list[int]
    callbacks: dict[str, int]
    is_new: bool


@dataclass
class Batch:
    """Jobs and the callbacks that run after them all (``codity.create_batch``). ``open``:
    more members may join (``add_to_batch``) until ``seal_batch``."""

    name: str | None = None
    on_all_done: Callback | None = None
    on_all_succeeded: Callback | None = None
    on_any_dead: Callback | None = None
    idempotency_key: str | None = None
    open: bool = False
    jobs: list[dict[str, Any]] = field(default_factory=list)

    def job(
        self,
        task: Task | str,
        payload: Any = None,
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
    ) -> None:
        self.jobs.append(_job_fields(task, payload, queue, run_at, priority, max_attempts))

    def spec(self) -> dict[str, Any]:
        callbacks = {
            name: callback.spec()
            for name, callback in (
                ("all_done", self.on_all_done),
                ("all_succeeded", self.on_all_succeeded),
                ("any_dead", self.on_any_dead),
            )
            if callback is not None
        }
        spec: dict[str, Any] = {"jobs": self.jobs, "callbacks": callbacks}
        if self.open:
            spec["open"] = True
        for name, value in (("name", self.name), ("idempotency_key", self.idempotency_key)):
            if value is not None:
                spec[name] = value
        return spec

    def enqueue(self, conn: Conn, *, project_id: int | None = None) -> CreatedBatch:
        rows = conn.execute(
            "SELECT batch_id, job_id, callback, is_new FROM codity.create_batch(%s, %s)",
            [Jsonb(self.spec()), project_id],
        ).fetchall()
        return CreatedBatch(
            batch_id=int(rows[0][0]),
            members=[int(job) for _, job, callback, _ in rows if callback is None],
            callbacks={str(callback): int(job) for _, job, callback, _ in rows if callback},
            is_new=bool(rows[0][3]),
        )


def add_to_batch(
    conn: Conn, batch_id: int, jobs: Iterable[Mapping[str, Any]], *, project_id: int | None = None
) -> list[int]:
    """Add job objects (``{"queue", "task", "payload", ...}``) to an open batch; their ids."""
    rows = conn.execute(
        "SELECT job_id FROM codity.add_to_batch(%s, %s, %s)",
        [batch_id, Jsonb(list(jobs)), project_id],
    ).fetchall()
    return [int(r[0]) for r in rows]


def seal_batch(conn: Conn, batch_id: int, *, project_id: int | None = None) -> dict[str, str]:
    """Seal an open batch; its callbacks' statuses by name."""
    rows = conn.execute(
        "SELECT callback, job_status::text FROM codity.seal_batch(%s, %s)", [batch_id, project_id]
    ).fetchall()
    return {str(name): str(status) for name, status in rows}
