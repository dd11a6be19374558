"""Enqueue throughput and latency over the HTTP API, against direct SQL in the same run.

Usage (a running `codity web` whose enqueue limit is lifted, on a seeded database):

    CODITY_ENQUEUES_PER_MINUTE=100000000 ./codity web --port 3222 &
    .venv/bin/python scripts/bench_api.py http://127.0.0.1:3222 "$(./codity db url)"

Signs in as the demo operator (run `./codity demo` first), enqueues into the demo's
`reports` queue with run_at in 2100 (so no worker picks them up), and prints one line per
figure. Compare the ratio between lines of one run, not absolute numbers across machines.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
import psycopg

LATER = "2100-01-01T00:00:00Z"


def measure(
    base: str, headers: dict[str, str], path: str, body: Callable[[], Any], clients: int, s: float
) -> tuple[float, float, float]:
    latencies: list[float] = []
    stop = time.monotonic() + s

    def client() -> None:
        with httpx.Client(base_url=base, headers=headers) as c:
            while time.monotonic() < stop:
                started = time.perf_counter()
                response = c.post(path, json=body())
                latencies.append(time.perf_counter() - started)
                if response.status_code not in (200, 201):
                    raise SystemExit(f"{path}: {response.status_code} {response.text[:200]}")

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies.sort()
    return (
        len(latencies) / s,
        latencies[len(latencies) // 2] * 1000,
        latencies[int(len(latencies) * 0.99)] * 1000,
    )


def main(base: str, database_url: str, clients: int = 4, seconds: float = 8.0) -> None:
    login = httpx.post(
        f"{base}/api/v1/auth/login",
        json={"email": "operator@codity.test", "password": "correct-horse-battery-staple"},
    )
    headers = {"Authorization": f"Bearer {login.json()['data']['access_token']}"}

    def one() -> dict[str, Any]:
        return {
            "queue": "reports",
            "task": "reports.generate",
            "payload": {"r": 1},
            "run_at": LATER,
        }

    def batch() -> dict[str, Any]:
        jobs = [
            {"task": "reports.generate", "payload": {"i": i}, "run_at": LATER} for i in range(100)
        ]
        return {"queue": "reports", "jobs": jobs}

    rate, p50, p99 = measure(base, headers, "/api/v1/jobs", one, clients, seconds)
    print(
        f"HTTP POST /jobs, {clients} clients: {rate:.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )
    rate, p50, _ = measure(base, headers, "/api/v1/jobs/batch", batch, clients, seconds)
    print(
        f"HTTP POST /jobs/batch of 100, {clients} clients: {rate * 100:.0f} jobs/s, "
        f"p50 {p50:.1f} ms"
    )
    with psycopg.connect(database_url, autocommit=True) as conn:
        n, stop = 0, time.monotonic() + seconds / 2
        while time.monotonic() < stop:
            conn.execute(
                "SELECT * FROM codity.enqueue('reports', 'reports.generate', '{\"r\": 1}', %s)",
                [LATER],
            )
            n += 1
    print(f"SQL codity.enqueue, 1 connection: {n / (seconds / 2):.0f} jobs/s")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
