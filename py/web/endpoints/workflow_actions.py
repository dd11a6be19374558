"""Workflows and batches, written: enqueue a graph, create and grow a batch, seal it, and
what an operator does to a workflow (cancel, retry, skip a node).

Every route is one call of the SQL API with the guarded project (``codity.enqueue_workflow``,
``create_batch``, ``add_to_batch``, ``seal_batch``, ``cancel_workflow``, ``retry_workflow``,
``skip_node``), so the API, psql users and the Python builders (``codity.workflows``) obey
one set of rules: the database checks cycles, unknown keys, limits, queues of another
project and transitions, and answers with a SQLSTATE that becomes the error envelope. The
models here only give the JSON a shape for the OpenAPI document and refuse what can never
be valid before a transaction opens.

Answers are the workflow as it is once the write committed (``ReadBack``, as for jobs), in
the shape of ``GET /api/v1/workflows/{workflow_id}``, with ``meta`` saying what the call
did. Payload values are never logged: counts only.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, Self

from psycopg.types.json import Jsonb
from pydantic import AfterValidator, BaseModel, Field, model_validator

from codity.web.access import Limit, Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint, ReadBack, Reply
from codity.web.endpoints.workflows import MAX_NODES, WorkflowDetail, read_workflow
from codity.web.fields import BoundedText, QueueName, RunAt, Strict, no_nul
from codity.web.lookups import fetch_all, path_id

__all__ = ["ROUTES"]

log = logging.getLogger(__name__)

MAX_BATCH_CALL = 10_000
"""Members a create or add call takes (a batch holds up to 100,000, in several calls)."""

NodeKey = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(no_nul)]


class JobFields(Strict):
    """A job of a workflow or batch: where it runs and what it runs."""

    queue: QueueName
    task: BoundedText
    payload: dict[str, Any] = Field(default_factory=dict)
    run_at: RunAt | None = None
    priority: int = Field(0, ge=-1000, le=1000)
    max_attempts: int | None = Field(None, ge=1, le=1000)

    def spec(self) -> dict[str, Any]:
        """The job object of the SQL API: only what was given, run_at in ISO 8601."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)


class EdgeSpec(Strict):
    key: NodeKey
    """The parent's node key."""
    on_failure: Literal["cancel", "ignore", "hold", "run"]
    """What the parent's dead letter or cancel does to this node."""


class NodeSpec(JobFields):
    key: NodeKey
    after: list[NodeKey | EdgeSpec] = Field(default_factory=list, max_length=MAX_NODES)
    """The nodes this one runs after: a key (the workflow's on_failure), or a key with its own
    policy."""

    def spec(self) -> dict[str, Any]:
        node = {"key": self.key, **super().spec()}
        node.pop("after", None)
        if self.after:
            node["after"] = [a if isinstance(a, str) else a.model_dump() for a in self.after]
        return node


class WorkflowSpec(Strict):
    name: BoundedText | None = None
    idempotency_key: BoundedText | None = None
    """Per project: a repeat answers the workflow already enqueued with it, 200."""
    on_failure: Literal["cancel", "ignore", "hold"] | None = None
    """The policy of every edge given by key alone (default cancel)."""
    nodes: list[NodeSpec] = Field(min_length=1, max_length=MAX_NODES)

    def spec(self) -> dict[str, Any]:
        spec = self.model_dump(mode="json", exclude_none=True, exclude={"nodes"})
        return spec | {"nodes": [n.spec() for n in self.nodes]}


class BatchCallbacks(Strict):
    all_done: JobFields | None = None
    """Runs when every member finished, however."""
    all_succeeded: JobFields | None = None
    """Runs when every member completed; cancelled when one was dead-lettered or cancelled."""
    any_dead: JobFields | None = None
    """Runs when a member is dead-lettered; cancelled when none was."""

    def given(self) -> dict[str, JobFields]:
        """The callbacks given, by name."""
        named = {"all_done": self.all_done, "all_succeeded": self.all_succeeded,
                 "any_dead": self.any_dead}  # fmt: skip
        return {name: job for name, job in named.items() if job is not None}


class BatchSpec(Strict):
    name: BoundedText | None = None
    idempotency_key: BoundedText | None = None
    """Per project: a repeat answers the batch already created with it, 200."""
    open: bool = False
    """More members may join (POST .../jobs) until the batch is sealed; its callbacks wait."""
    jobs: list[JobFields] = Field(default_factory=list, max_length=MAX_BATCH_CALL)
    callbacks: BatchCallbacks = Field(default_factory=BatchCallbacks)

    @model_validator(mode="after")
    def _something_to_wait_for(self) -> Self:
        if not self.jobs and not self.open:
            raise ValueError("a sealed batch needs at least one job (or create it open)")
        if not self.jobs and not self.callbacks.given():
            raise ValueError("a batch needs a job or a callback")
        return self

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "jobs": [j.spec() for j in self.jobs],
            "callbacks": {name: job.spec() for name, job in self.callbacks.given().items()},
        }
        if self.open:
            spec["open"] = True
        for name in ("name", "idempotency_key"):
            if (value := getattr(self, name)) is not None:
                spec[name] = value
        return spec


class BatchJobs(Strict):
    jobs: list[JobFields] = Field(min_length=1, max_length=MAX_BATCH_CALL)


class AddedJob(BaseModel):
    id: int
    status: str


class RetrySpec(Strict):
    mode: Literal["failed", "failed_and_downstream", "all"] = "failed"
    """failed: dead-lettered and cancelled nodes; failed_and_downstream: and every node after
    them; all: every node, once nothing is unfinished."""


def _answer(workflow_id: int, status: int = 200, **meta: Any) -> ReadBack:
    """The workflow as it is once the write committed, with ``meta``."""

    async def read(call: Call[Any, Any]) -> Reply:
        workflow = await read_workflow(call, workflow_id, MAX_NODES)
        return Reply(workflow, status=status, meta=meta)

    return ReadBack(read)


async def enqueue_workflow(call: Call[WorkflowSpec, None]) -> ReadBack:
    rows = await fetch_all(
        call,
        "SELECT workflow_id, is_new FROM codity.enqueue_workflow(%s, %s)",
        [Jsonb(call.body.spec()), call.project_id],
    )
    workflow_id, is_new = rows[0]["workflow_id"], bool(rows[0]["is_new"])
    log.info(
        "workflow enqueued",
        extra={"workflow_id": workflow_id, "nodes": len(rows), "duplicate": not is_new},
    )
    return _answer(workflow_id, 201 if is_new else 200, duplicate=not is_new)


async def cancel_workflow(call: Call[None, None]) -> ReadBack:
    workflow_id = path_id(call, "workflow_id", "workflow")
    rows = await fetch_all(
        call,
        "SELECT job_id FROM codity.cancel_workflow(%s, %s)",
        [workflow_id, call.project_id],
    )
    log.info("workflow cancelled", extra={"workflow_id": workflow_id, "jobs": len(rows)})
    return _answer(workflow_id, cancelled=len(rows))


async def retry_workflow(call: Call[RetrySpec, None]) -> ReadBack:
    workflow_id = path_id(call, "workflow_id", "workflow")
    rows = await fetch_all(
        call,
        "SELECT job_id FROM codity.retry_workflow(%s, %s, %s)",
        [workflow_id, call.body.mode, call.project_id],
    )
    log.info(
        "workflow retried",
        extra={"workflow_id": workflow_id, "mode": call.body.mode, "jobs": len(rows)},
    )
    return _answer(workflow_id, retried=len(rows))


async def skip_node(call: Call[None, None]) -> ReadBack:
    workflow_id = path_id(call, "workflow_id", "workflow")
    node_key = str(call.path["node_key"])
    rows = await fetch_all(
        call,
        "SELECT job_id, previous_status FROM codity.skip_node(%s, %s, %s)",
        [workflow_id, node_key, call.project_id],
    )
    skipped = rows[0]
    log.info(
        "workflow node skipped", extra={"workflow_id": workflow_id, "job_id": skipped["job_id"]}
    )
    return _answer(
        workflow_id, skipped_job_id=skipped["job_id"], previous_status=skipped["previous_status"]
    )


async def create_batch(call: Call[BatchSpec, None]) -> ReadBack:
    rows = await fetch_all(
        call,
        "SELECT batch_id, callback, is_new FROM codity.create_batch(%s, %s)",
        [Jsonb(call.body.spec()), call.project_id],
    )
    batch_id, is_new = rows[0]["batch_id"], bool(rows[0]["is_new"])
    members = sum(1 for r in rows if r["callback"] is None)
    log.info(
        "batch created",
        extra={"workflow_id": batch_id, "jobs": members, "duplicate": not is_new},
    )
    return _answer(batch_id, 201 if is_new else 200, duplicate=not is_new)


async def add_to_batch(call: Call[BatchJobs, None]) -> Reply:
    batch_id = path_id(call, "batch_id", "workflow")
    rows = await fetch_all(
        call,
        "SELECT job_id, job_status FROM codity.add_to_batch(%s, %s, %s)",
        [batch_id, Jsonb([j.spec() for j in call.body.jobs]), call.project_id],
    )
    log.info("batch grown", extra={"workflow_id": batch_id, "jobs": len(rows)})
    return Reply(
        [{"id": r["job_id"], "status": r["job_status"]} for r in rows],
        status=201,
        meta={"batch_id": batch_id, "added": len(rows)},
    )


async def seal_batch(call: Call[None, None]) -> ReadBack:
    batch_id = path_id(call, "batch_id", "workflow")
    await fetch_all(
        call, "SELECT callback FROM codity.seal_batch(%s, %s)", [batch_id, call.project_id]
    )
    log.info("batch sealed", extra={"workflow_id": batch_id})
    return _answer(batch_id)


_WORKFLOW = "/api/v1/workflows/{workflow_id:int}"
_BATCH = "/api/v1/batches/{batch_id:int}"
_JOB_EXAMPLE = {"queue": "emails", "task": "emails.send", "payload": {"to": "a@example.com"}}

ROUTES = [
    Endpoint(
        "POST",
        "/api/v1/workflows",
        Scope.PROJECT,
        enqueue_workflow,
        "Enqueue a workflow: nodes and the nodes each runs after, checked and written whole "
        "(an idempotent repeat returns the existing workflow with 200)",
        "workflows",
        min_role=Role.MEMBER,
        body=WorkflowSpec,
        response=WorkflowDetail,
        status=201,
        limit=Limit.ENQUEUE,
        errors=(200, 404, 409, 429),
        example={
            "name": "welcome",
            "nodes": [
                {"key": "fetch", **_JOB_EXAMPLE},
                {"key": "send", **_JOB_EXAMPLE, "after": ["fetch"]},
            ],
        },
    ),
    Endpoint(
        "POST",
        _WORKFLOW + "/cancel",
        Scope.PROJECT,
        cancel_workflow,
        "Cancel every unfinished node of a workflow (an open batch is sealed)",
        "workflows",
        min_role=Role.MEMBER,
        response=WorkflowDetail,
        errors=(404, 409),
    ),
    Endpoint(
        "POST",
        _WORKFLOW + "/retry",
        Scope.PROJECT,
        retry_workflow,
        "Run a workflow's failed nodes again (mode failed), and the nodes after them "
        "(failed_and_downstream), or every node (all)",
        "workflows",
        min_role=Role.MEMBER,
        body=RetrySpec,
        response=WorkflowDetail,
        errors=(404, 409),
        example={"mode": "failed"},
    ),
    Endpoint(
        "POST",
        _WORKFLOW + "/nodes/{node_key}/skip",
        Scope.PROJECT,
        skip_node,
        "Mark a node that is not running or done as completed without running it; the nodes "
        "its failure cancelled wait again",
        "workflows",
        min_role=Role.MEMBER,
        response=WorkflowDetail,
        errors=(404, 409),
    ),
    Endpoint(
        "POST",
        "/api/v1/batches",
        Scope.PROJECT,
        create_batch,
        "Create a batch: jobs and the callbacks that run after them all (open: more jobs may "
        "join until it is sealed)",
        "workflows",
        min_role=Role.MEMBER,
        body=BatchSpec,
        response=WorkflowDetail,
        status=201,
        limit=Limit.ENQUEUE,
        errors=(200, 404, 409, 429),
        example={
            "name": "import",
            "jobs": [_JOB_EXAMPLE, _JOB_EXAMPLE],
            "callbacks": {"all_done": {"queue": "emails", "task": "import.report"}},
        },
    ),
    Endpoint(
        "POST",
        _BATCH + "/jobs",
        Scope.PROJECT,
        add_to_batch,
        "Add up to 10,000 jobs to an open batch",
        "workflows",
        min_role=Role.MEMBER,
        body=BatchJobs,
        response=AddedJob,
        many=True,
        status=201,
        limit=Limit.ENQUEUE,
        errors=(404, 409, 429),
        example={"jobs": [_JOB_EXAMPLE]},
    ),
    Endpoint(
        "POST",
        _BATCH + "/seal",
        Scope.PROJECT,
        seal_batch,
        "Seal a batch: no job joins it after, and its callbacks run once its jobs finished "
        "(sealing a sealed batch changes nothing)",
        "workflows",
        min_role=Role.MEMBER,
        response=WorkflowDetail,
        errors=(404,),
    ),
]
