"""Where a Citus cluster's extra time per job goes, call by call and statement by statement.

    .venv/bin/python scripts/citus_call_costs.py [jobs] [batch] [rounds]

Starts the servers ``codity bench --citus`` starts (plain PostgreSQL 18 and a coordinator
with two worker nodes, the same settings, ``pg_stat_statements`` with ``track = all``), then
on each side, per round: ``jobs`` jobs (30,000 by default) enqueued into one queue, and one
connection that claims ``batch`` of them with ``p_start`` (300 by default) and completes
them with ``complete_many_in_queue`` until none is left: the worker's two hot calls, with no
worker. Prints each round's rate and the client's time per job in each call; then, for the
last round, the statements that took the most time on each
server, in µs per job (top level: what a client sent; nested: what ran inside a function).
docs/PERFORMANCE.md, "Codity on Citus", shows a run. Every server is deleted at the end.
"""

from __future__ import annotations

import json
import sys
import time

import psycopg

from codity.bench.citus_servers import BenchServers, Node

JOBS = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 300
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
CLAIM = "SELECT c.job_id, c.fence FROM codity.claim_in_queue(%s, %s, %s, true, true) AS c"
COMPLETE = (
    "SELECT c.job_id, c.accepted FROM codity.complete_many_in_queue("
    "%s, %s::bigint[], %s::integer[], %s::jsonb[], p_durable => false) AS c"
)
TOP = """
SELECT calls, total_exec_time, toplevel,
       pg_catalog.regexp_replace(pg_catalog.left(query, 100), '\\s+', ' ', 'g')
FROM public.pg_stat_statements
WHERE query NOT LIKE '%%pg_stat_statements%%'
ORDER BY total_exec_time DESC LIMIT 12
"""


def _setup(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        queue = conn.execute("SELECT queue_id FROM codity.create_queue('calls')").fetchone()
        worker = conn.execute("SELECT codity.register_worker('calls', '{}', %s)", [BATCH])
        return int(queue[0]), int(worker.fetchone()[0])  # type: ignore[index]


def _load(url: str) -> None:
    spec = json.dumps([{"task": "t"}] * 1_000)
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(JOBS // 1_000):
            conn.execute("SELECT count(*) FROM codity.enqueue_many('calls', %s::jsonb)", [spec])
        conn.execute("VACUUM ANALYZE codity.jobs, codity.job_executions")


def _drive(url: str, queue: int, worker: int) -> tuple[int, float, float, float]:
    """Jobs done, seconds, seconds in claims, seconds in completions."""
    done, in_claims, in_completions = 0, 0.0, 0.0
    with psycopg.connect(url, autocommit=True) as conn:
        began = time.perf_counter()
        while True:
            start = time.perf_counter()
            rows = conn.execute(CLAIM, [queue, worker, BATCH]).fetchall()
            claimed = time.perf_counter()
            in_claims += claimed - start
            if not rows:
                break
            ids, fences = [r[0] for r in rows], [r[1] for r in rows]
            results = [json.dumps(1733.25)] * len(ids)
            outcomes = conn.execute(COMPLETE, [queue, ids, fences, results]).fetchall()
            if not all(accepted for _, accepted in outcomes):
                raise SystemExit("a completion was refused")
            in_completions += time.perf_counter() - claimed
            done += len(ids)
        return done, time.perf_counter() - began, in_claims, in_completions


def _statements(nodes: list[Node], jobs: int) -> None:
    for node in nodes:
        with psycopg.connect(node.url(), autocommit=True) as conn:
            for calls, total_ms, top, query in conn.execute(TOP).fetchall():
                level = "top" if top else "nested"
                per_job = total_ms * 1_000 / jobs
                print(f"  {node.name:11} {level:6} {calls:6} calls {per_job:7.2f} µs/job  {query}")


def main() -> None:
    with BenchServers() as servers:
        sides: dict[str, list[Node]] = {"plain": servers.plain, "citus": servers.cluster}
        ids = {name: _setup(nodes[0].url()) for name, nodes in sides.items()}
        for n in range(ROUNDS):
            for name, nodes in sides.items():
                _load(nodes[0].url())
                for node in nodes:
                    with psycopg.connect(node.url(), autocommit=True) as conn:
                        conn.execute("SELECT pg_stat_statements_reset()")
                jobs, seconds, claims, completions = _drive(nodes[0].url(), *ids[name])
                print(f"round {n + 1} {name:5}: {jobs / seconds:8,.0f} jobs/s;"
                      f" per job at the client: claim {claims / jobs * 1e6:5.1f} µs,"
                      f" complete {completions / jobs * 1e6:5.1f} µs", flush=True)  # fmt: skip
                if n == ROUNDS - 1:
                    _statements(nodes, jobs)


if __name__ == "__main__":
    main()
