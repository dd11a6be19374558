"""The worker's garbage-collector time over a drain (DESIGN_DECISIONS 48).

    ./codity db start
    .venv/bin/python scripts/worker_gc.py postgresql://postgres@127.0.0.1:55432/postgres \\
        [jobs] [concurrency]

A scratch database gets ``jobs`` no-op jobs (60,000 by default) in a paused queue, and one
real ``codity worker`` process (concurrency 500 by default) drains them, as
``codity bench --against pgqueuer`` does (codity.bench._codity_runs.codity_drain). The
worker runs with a ``sitecustomize`` module on its PYTHONPATH that times every collection
through ``gc.callbacks`` and prints, when the process exits, the collector's CPU time, the
collections per generation and the process's whole CPU time. To compare with the
collector's defaults, comment out the ``gc.freeze()`` and ``gc.set_threshold`` lines of
``codity.worker.main.run_worker`` and run it again. Prints the drain's jobs/s and the
workers' CPU per job beside it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import psycopg

from codity.bench._against_model import CODITY, Config
from codity.bench._codity_runs import codity_drain
from codity.explain import scratch_database

_SITECUSTOMIZE = '''
import atexit, collections, gc, sys, time
_spent = [0.0, 0.0]
_runs = collections.Counter()
def _timed(phase, info):
    if phase == "start":
        _spent[1] = time.thread_time()
    else:
        _spent[0] += time.thread_time() - _spent[1]
        _runs[info["generation"]] += 1
gc.callbacks.append(_timed)
atexit.register(lambda: print(
    f"worker GC: {_spent[0]:.3f} s in {dict(sorted(_runs.items()))} collections "
    f"(generation: count); process CPU {time.process_time():.2f} s",
    file=sys.stderr, flush=True))
'''


def main(url: str, jobs: int, concurrency: int) -> None:
    with tempfile.TemporaryDirectory(prefix="codity-gc-") as tmp:
        hook, logs = Path(tmp) / "hook", Path(tmp) / "logs"
        hook.mkdir()
        logs.mkdir()
        (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(hook), os.environ.get("PYTHONPATH")) if p
        )
        with scratch_database(url, "codity_gc") as db, psycopg.connect(db, autocommit=True) as conn:
            run = codity_drain(db, conn, Config(CODITY, 1, concurrency), jobs, logs)
        print(f"{jobs:,} jobs at concurrency {concurrency}: {jobs / run.seconds:,.0f} jobs/s, "
              f"workers' CPU {run.workers_cpu_s / jobs * 1e6:.0f} µs per job")  # fmt: skip
        for log in sorted(logs.iterdir()):
            for line in log.read_text().splitlines():
                if line.startswith("worker GC:"):
                    print(line)


if __name__ == "__main__":
    main(
        sys.argv[1],
        int(sys.argv[2]) if len(sys.argv) > 2 else 60_000,
        int(sys.argv[3]) if len(sys.argv) > 3 else 500,
    )
