"""Every public SQL function, called once with valid arguments, as a role would call it.

The role tests (pg_temp shadowing, the locked clock) need to call *every* function a role
may execute, each with arguments that make it do real work. A scenario is that list of
calls for one role, in an order where each call finds the state it needs (a claim before a
start, a failure before a replay). ``set_up`` builds what a role cannot build itself (queues,
a dead letter) as the superuser; ``run`` plays a scenario on one connection and returns
every call's rows, so two runs can be compared.

A call's SQL may hold ``{now}`` where the function takes ``p_now``: ``run`` fills it with
nothing, or with a named ``p_now`` argument to try moving the clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row

__all__ = ["SCENARIOS", "Call", "called_functions", "render", "run", "set_up"]

Env = dict[str, Any]


@dataclass(frozen=True)
class Call:
    function: str
    sql: str
    params: Callable[[Env], dict[str, Any]] = field(default=lambda env: {})
    save: str | None = None  # store the rows (list of dicts) under this name

    @property
    def takes_now(self) -> bool:
        return "{now}" in self.sql or "{now_only}" in self.sql


def set_up(conn: psycopg.Connection[Any]) -> Env:
    """As a superuser: two queues, a schedule and three dead letters to replay.

    Returns what the scenarios need to know of it (the dead letters' ids and their jobs').
    """
    conn.execute("SELECT codity.create_queue('emails', p_max_attempts => 3)")
    conn.execute("SELECT codity.create_queue('reports', p_max_attempts => 1)")
    conn.execute(
        "SELECT codity.create_schedule('nightly', 'reports', '0 2 * * *', 'reports.nightly')"
    )
    worker = conn.execute("SELECT codity.register_worker('setup', ARRAY['reports'])").fetchone()
    assert worker is not None
    for task in ("reports.dead-1", "reports.dead-2", "reports.dead-3"):
        conn.execute("SELECT codity.enqueue('reports', %s)", [task])
        claimed = conn.execute(
            "SELECT job_id, fence FROM codity.claim(%s, 'reports', 1)", [worker[0]]
        ).fetchone()
        assert claimed is not None
        conn.execute("SELECT codity.start(%s, %s)", list(claimed))
        conn.execute("SELECT codity.fail(%s, %s, 'boom')", list(claimed))
    conn.execute("SELECT codity.deregister_worker(%s)", [worker[0]])
    dead = conn.execute("SELECT id, job_id FROM codity.dead_letters ORDER BY id").fetchall()
    doomed = conn.execute(
        "INSERT INTO codity.projects (org_id, slug, name)"
        " SELECT org_id, 'doomed', 'Doomed' FROM codity.projects WHERE is_default RETURNING id"
    ).fetchone()
    assert doomed is not None
    return {
        "dead_letters": [d[0] for d in dead],
        "dead_jobs": [d[1] for d in dead],
        "doomed_project": doomed[0],
    }


def _claimed(env: Env, i: int) -> tuple[int, int]:
    row = env["claimed"][i]
    return int(row["job_id"]), int(row["fence"])


def _queue(env: Env) -> dict[str, Any]:
    return {"queue": int(env["queues"][0]["queue_id"])}


def _by_id(env: Env, *positions: int) -> dict[str, Any]:
    rows = [env["by_id"][i] for i in positions]
    return {"jobs": [r["job_id"] for r in rows], "fences": [r["fence"] for r in rows]}


def _one_by_id(env: Env, i: int) -> dict[str, Any]:
    return {"job": env["by_id"][i]["job_id"], "fence": env["by_id"][i]["fence"]}


_WORKER = (
    Call("find_project", "SELECT codity.find_project('default')"),
    Call(
        "register_worker",
        "SELECT codity.register_worker('w1', ARRAY['emails'], 5, 'host-a', 42{now})",
        save="worker",
    ),
    Call(
        "worker_queues",
        "SELECT * FROM codity.worker_queues(%(worker)s)",
        lambda env: {"worker": env["worker"][0]["register_worker"]},
        save="queues",
    ),
    Call(
        "queue_nodes",
        "SELECT * FROM codity.queue_nodes(%(worker)s)",
        lambda env: {"worker": env["worker"][0]["register_worker"]},
    ),
    Call("enqueue", "SELECT * FROM codity.enqueue('emails', 'emails.send', '{\"n\": 1}'{now})"),
    Call(
        "enqueue_many",
        "SELECT * FROM codity.enqueue_many('emails',"
        ' \'[{"task": "a"}, {"task": "b"}, {"task": "c", "priority": 5}]\'{now})',
    ),
    # The bodies that take the queue's id (DESIGN.md, "Room to scale out", rule 1), on
    # jobs of their own: the calls by name and by job id above and below are
    # wrappers over them.
    Call(
        "enqueue_in_queue",
        "SELECT * FROM codity.enqueue_in_queue(%(queue)s, 'd', p_priority => 2{now})",
        _queue,
    ),
    Call(
        "enqueue_many_in_queue",
        "SELECT * FROM codity.enqueue_many_in_queue(%(queue)s,"
        ' \'[{"task": "e"}, {"task": "f"}, {"task": "g"}]\'{now})',
        _queue,
    ),
    Call(
        "claim",
        "SELECT * FROM codity.claim(%(worker)s, 'emails', 4{now})",
        lambda env: {"worker": env["worker"][0]["register_worker"]},
        save="claimed",
    ),
    Call(
        "claim_in_queue",
        "SELECT * FROM codity.claim_in_queue(%(queue)s, %(worker)s, 3{now})",
        lambda env: {**_queue(env), "worker": env["worker"][0]["register_worker"]},
        save="by_id",
    ),
    Call(
        "dep_results",
        "SELECT * FROM codity.dep_results(%(queue)s, %(job)s, %(fence)s)",
        lambda env: {**_queue(env), **_one_by_id(env, 0)},
    ),
    Call(
        "start_many_in_queue",
        "SELECT * FROM codity.start_many_in_queue("
        "%(queue)s, %(jobs)s::bigint[], %(fences)s::integer[]{now})",
        lambda env: {**_queue(env), **_by_id(env, 0, 1, 2)},
    ),
    Call(
        "extend_leases",
        "SELECT * FROM codity.extend_leases("
        "%(queue)s, %(worker)s, %(jobs)s::bigint[], %(fences)s::integer[]{now})",
        lambda env: {
            **_queue(env),
            **_by_id(env, 0, 1, 2),
            "worker": env["worker"][0]["register_worker"],
        },
    ),
    Call(
        "complete_many_in_queue",
        "SELECT * FROM codity.complete_many_in_queue("
        "%(queue)s, %(jobs)s::bigint[], %(fences)s::integer[]{now})",
        lambda env: {**_queue(env), **_by_id(env, 0)},
    ),
    Call(
        "fail_in_queue",
        "SELECT * FROM codity.fail_in_queue(%(queue)s, %(job)s, %(fence)s, 'Timeout'{now})",
        lambda env: {**_queue(env), **_one_by_id(env, 1)},
    ),
    Call(
        "release_in_queue",
        "SELECT * FROM codity.release_in_queue(%(queue)s, %(job)s, %(fence)s{now})",
        lambda env: {**_queue(env), **_one_by_id(env, 2)},
    ),
    Call(
        "start",
        "SELECT * FROM codity.start(%(job)s, %(fence)s{now})",
        lambda env: dict(zip(("job", "fence"), _claimed(env, 0), strict=True)),
    ),
    Call(
        "start_many",
        "SELECT * FROM codity.start_many(%(jobs)s::bigint[], %(fences)s::integer[]{now})",
        lambda env: {
            "jobs": [_claimed(env, i)[0] for i in (1, 2, 3)],
            "fences": [_claimed(env, i)[1] for i in (1, 2, 3)],
        },
    ),
    Call(
        "heartbeat",
        "SELECT * FROM codity.heartbeat("
        "%(worker)s, %(jobs)s::bigint[], %(fences)s::integer[]{now})",
        lambda env: {
            "worker": env["worker"][0]["register_worker"],
            "jobs": [_claimed(env, i)[0] for i in range(4)],
            "fences": [_claimed(env, i)[1] for i in range(4)],
        },
    ),
    Call(
        "complete",
        "SELECT * FROM codity.complete(%(job)s, %(fence)s, '{\"ok\": true}'{now})",
        lambda env: dict(zip(("job", "fence"), _claimed(env, 0), strict=True)),
    ),
    Call(
        "complete_many",
        "SELECT * FROM codity.complete_many(%(jobs)s::bigint[], %(fences)s::integer[]{now})",
        lambda env: {"jobs": [_claimed(env, 1)[0]], "fences": [_claimed(env, 1)[1]]},
    ),
    Call(
        "fail",
        "SELECT * FROM codity.fail(%(job)s, %(fence)s, 'SMTPError: 451'{now})",
        lambda env: dict(zip(("job", "fence"), _claimed(env, 2), strict=True)),
    ),
    Call(
        "release",
        "SELECT * FROM codity.release(%(job)s, %(fence)s{now})",
        lambda env: dict(zip(("job", "fence"), _claimed(env, 3), strict=True)),
    ),
    # A claim whose answer the worker never got: it gives the job back, listing none.
    Call(
        "claim_in_queue",
        "SELECT * FROM codity.claim_in_queue(%(queue)s, %(worker)s, 1{now})",
        lambda env: {**_queue(env), "worker": env["worker"][0]["register_worker"]},
    ),
    Call(
        "release_lost_claims_in_queue",
        "SELECT * FROM codity.release_lost_claims_in_queue("
        "%(queue)s, %(worker)s, '{}'::bigint[]{now})",
        lambda env: {**_queue(env), "worker": env["worker"][0]["register_worker"]},
    ),
    Call(
        "get_job",
        "SELECT * FROM codity.get_job(%(job)s)",
        lambda env: {"job": _claimed(env, 0)[0]},
    ),
    Call(
        "get_job_executions",
        "SELECT * FROM codity.get_job_executions(%(job)s)",
        lambda env: {"job": _claimed(env, 2)[0]},
    ),
    Call("backoff_delay", "SELECT codity.backoff_delay('exponential', 1000, 60000, 3, 1.0)"),
    Call(
        "enqueue_workflow",
        'SELECT * FROM codity.enqueue_workflow(\'{"nodes": ['
        '{"key": "a", "queue": "emails", "task": "wf.a"},'
        ' {"key": "b", "queue": "emails", "task": "wf.b", "after": ["a"]}]}\'{now})',
    ),
    Call(
        "create_batch",
        'SELECT * FROM codity.create_batch(\'{"open": true,'
        ' "jobs": [{"queue": "emails", "task": "b.one"}],'
        ' "callbacks": {"all_done": {"queue": "emails", "task": "b.done"}}}\'{now})',
        save="batch",
    ),
    Call(
        "add_to_batch",
        "SELECT * FROM codity.add_to_batch(%(batch)s,"
        ' \'[{"queue": "emails", "task": "b.two"}]\'{now})',
        lambda env: {"batch": env["batch"][0]["batch_id"]},
    ),
    Call(
        "seal_batch",
        "SELECT callback, job_status FROM codity.seal_batch(%(batch)s{now})",
        lambda env: {"batch": env["batch"][0]["batch_id"]},
    ),
    Call(
        "deregister_worker",
        "SELECT codity.deregister_worker(%(worker)s{now})",
        lambda env: {"worker": env["worker"][0]["register_worker"]},
    ),
)

_READ = (
    Call("backoff_delay", "SELECT codity.backoff_delay('linear', 500, 60000, 2, 0.5)"),
    Call("health", "SELECT check_name, alarm FROM codity.health()"),
    Call(
        "get_job",
        "SELECT * FROM codity.get_job(%(job)s)",
        lambda env: {"job": env["dead_jobs"][2]},
    ),
    Call(
        "get_job_executions",
        "SELECT * FROM codity.get_job_executions(%(job)s)",
        lambda env: {"job": env["dead_jobs"][2]},
    ),
    Call(
        "cron_next",
        "SELECT codity.cron_next('*/15 9-17 * * MON-FRI', '2030-01-01 00:00Z', 'Europe/London')",
    ),
    Call("cron_validate", "SELECT codity.cron_validate('0 2 * * *', 'Asia/Kolkata')"),
    Call("count_cap", "SELECT codity.count_cap()"),
    Call(
        "jobs_with_payload",
        'SELECT * FROM codity.jobs_with_payload(\'{"to": "a@example.com"}\'::pg_catalog.jsonb)',
    ),
    Call("queue_depths", "SELECT * FROM codity.queue_depths(NULL, 100{now})"),
)

_APP = (
    *_WORKER,
    *_READ,
    Call("create_queue", "SELECT * FROM codity.create_queue('webhooks', p_max_attempts => 2)"),
    Call("pause_queue", "SELECT codity.pause_queue('webhooks'{now})"),
    Call("resume_queue", "SELECT codity.resume_queue('webhooks'{now})"),
    Call(
        "create_schedule",
        "SELECT * FROM codity.create_schedule("
        "'hourly', 'webhooks', '0 * * * *', 'hooks.ping'{now})",
    ),
    Call("pause_schedule", "SELECT codity.pause_schedule('hourly'{now})"),
    Call("resume_schedule", "SELECT codity.resume_schedule('hourly'{now})"),
    Call("schedule_next_runs", "SELECT * FROM codity.schedule_next_runs('hourly', 3{now})"),
    Call("run_schedule_now", "SELECT * FROM codity.run_schedule_now('hourly'{now})"),
    Call("resume_all", "SELECT * FROM codity.resume_all({now_only})"),
    Call(
        "enqueue",
        "SELECT * FROM codity.enqueue('webhooks', 'hooks.ping'{now})",
        save="to_cancel",
    ),
    Call(
        "cancel",
        "SELECT * FROM codity.cancel(%(job)s{now})",
        lambda env: {"job": env["to_cancel"][0]["job_id"]},
    ),
    Call(
        "replay_dead_letter",
        "SELECT * FROM codity.replay_dead_letter(%(dead)s{now})",
        lambda env: {"dead": env["dead_letters"][0]},
    ),
    Call(
        "retry_job",
        "SELECT * FROM codity.retry_job(%(job)s{now})",
        lambda env: {"job": env["dead_jobs"][1]},
    ),
    Call(
        "retry_jobs",
        "SELECT * FROM codity.retry_jobs(ARRAY[%(job)s, %(other)s]::bigint[]{now})",
        lambda env: {"job": env["dead_jobs"][2], "other": env["dead_jobs"][1]},
    ),
    Call(
        "replay_dead_letters", "SELECT * FROM codity.replay_dead_letters(p_queue => 'reports'{now})"
    ),
    Call(
        "enqueue",
        "SELECT * FROM codity.enqueue('webhooks', 'hooks.bulk'{now})",
        save="to_bulk_cancel",
    ),
    Call(
        "cancel_jobs",
        "SELECT * FROM codity.cancel_jobs(ARRAY[%(job)s, %(dead)s]::bigint[]{now})",
        lambda env: {"job": env["to_bulk_cancel"][0]["job_id"], "dead": env["dead_jobs"][0]},
    ),
    Call(
        "enqueue_workflow",
        'SELECT * FROM codity.enqueue_workflow(\'{"nodes": ['
        '{"key": "a", "queue": "webhooks", "task": "wf.a"},'
        ' {"key": "b", "queue": "webhooks", "task": "wf.b", "after": ["a"]},'
        ' {"key": "c", "queue": "webhooks", "task": "wf.c", "after": ["b"]}]}\'{now})',
        save="flow",
    ),
    Call(
        "skip_node",
        "SELECT * FROM codity.skip_node(%(flow)s, 'a'{now})",
        lambda env: {"flow": env["flow"][0]["workflow_id"]},
    ),
    Call(
        "cancel_workflow",
        "SELECT * FROM codity.cancel_workflow(%(flow)s{now})",
        lambda env: {"flow": env["flow"][0]["workflow_id"]},
    ),
    Call(
        "retry_workflow",
        "SELECT * FROM codity.retry_workflow(%(flow)s{now})",
        lambda env: {"flow": env["flow"][0]["workflow_id"]},
    ),
    Call("sweep_workers", "SELECT * FROM codity.sweep_workers({now_only})"),
    Call("reap", "SELECT * FROM codity.reap({now_only})"),
    Call("reap_in_queue", "SELECT * FROM codity.reap_in_queue(%(queue)s{now})", _queue),
    Call("promote", "SELECT codity.promote({now_only})"),
    Call("materialize_cron", "SELECT * FROM codity.materialize_cron({now_only})"),
    Call("tick", "SELECT * FROM codity.tick({now_only})"),
    Call("roll_up", "SELECT codity.roll_up({now_only})"),
    Call("prune", "SELECT * FROM codity.prune({now_only})"),
    Call("prune_housekeeping", "SELECT * FROM codity.prune_housekeeping({now_only})"),
    Call("health", "SELECT check_name, alarm FROM codity.health()"),
    Call(
        "rate_limit_hit",
        "SELECT * FROM codity.rate_limit_hit('auth:ip:10.0.0.7', 5, interval '15 minutes'{now})",
    ),
    Call(
        "rate_limit_refund",
        "SELECT * FROM codity.rate_limit_refund("
        "'auth:ip:10.0.0.7', interval '15 minutes', now(){now})",
    ),
    Call(
        "api_key_identity",
        "SELECT * FROM codity.api_key_identity("
        "pg_catalog.sha256('cdy_nothing'::pg_catalog.bytea){now})",
    ),
    Call("configure", "SELECT * FROM codity.configure(interval '20 seconds')"),
    Call("delete_schedule", "SELECT codity.delete_schedule('hourly')"),
    Call("delete_queue", "SELECT codity.delete_queue('webhooks', p_force => true)"),
    Call(
        "delete_project",
        "SELECT codity.delete_project(%(project)s)",
        lambda env: {"project": env["doomed_project"]},
    ),
    Call("current_project_id", "SELECT codity.current_project_id()"),
    Call("current_org_id", "SELECT codity.current_org_id()"),
)

SCENARIOS: dict[str, tuple[Call, ...]] = {
    "codity_worker": _WORKER,
    "codity_app": _APP,
    "codity_readonly": _READ,
}


def called_functions(role: str) -> set[str]:
    return {call.function for call in SCENARIOS[role]}


def render(call: Call, now: str | None = None) -> str:
    """The call's SQL, with ``p_now => <now>`` where the function takes it (or without)."""
    if now is None:
        text = call.sql.replace("{now}", "").replace("{now_only}", "")
    else:
        text = call.sql.replace("{now}", f", p_now => {now}").replace(
            "{now_only}", f"p_now => {now}"
        )
    return text


def run(
    conn: psycopg.Connection[Any], role: str, world: Env, *, now: str | None = None
) -> list[Any]:
    """Play a role's scenario in the world ``set_up`` made; returns each call's rows."""
    env: Env = dict(world)
    results: list[Any] = []
    for call in SCENARIOS[role]:
        cur = conn.cursor(row_factory=dict_row)
        cur.execute(render(call, now).encode(), call.params(env))
        rows = cur.fetchall()
        if call.save:
            env[call.save] = rows
        results.append((call.function, [tuple(r.values()) for r in rows]))
    return results
