"""The machine and server a run measured on: CPUs, memory, load, PostgreSQL and its settings."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._model import Machine

__all__ = ["SETTINGS", "describe_machine", "load_average"]

# What moves the figures: commit durability (every claim, start and completion commits),
# memory, WAL volume, background vacuum, and the planner's JIT.
SETTINGS = (
    "shared_buffers", "work_mem", "max_connections", "synchronous_commit", "fsync",
    "full_page_writes", "wal_level", "max_wal_size", "checkpoint_timeout", "autovacuum",
    "jit",
)  # fmt: skip


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe_machine(
    conn: psycopg.Connection[Any], load_before: tuple[float, float, float]
) -> Machine:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    row = conn.execute("SELECT pg_catalog.version()").fetchone()
    assert row is not None
    settings = tuple(
        (name, str(conn.execute("SELECT pg_catalog.current_setting(%s)", [name]).fetchall()[0][0]))
        for name in SETTINGS
    )
    return Machine(
        cpus=len(os.sched_getaffinity(0)),
        cpu_model=_cpu_model(),
        memory_gib=memory,
        load_before=load_before,
        load_after=load_average(),
        python=f"{platform.python_implementation()} {platform.python_version()}, "
        f"psycopg {psycopg.__version__}",
        postgres=str(row[0]),
        settings=settings,
    )
