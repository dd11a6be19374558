"""``codity worker``: load the app's registry and run a worker until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import gc
import importlib
import signal
import sys
from pathlib import Path

from codity.worker.registry import Registry
from codity.worker.runtime import Worker, WorkerConfig

__all__ = ["GC_THRESHOLDS", "load_registry", "run_worker"]

GC_THRESHOLDS = (20_000, 10, 10)
"""The cyclic collector's thresholds while a worker runs (CPython's default: 700, 10, 10).
Every claimed job allocates a dozen container objects that live until its completion is
reported, so at the default a worker draining no-op jobs ran a young-generation collection
every ~50 jobs, each rescanning the jobs in flight and promoting them: 0.41 s of collector
time per 60,000 jobs, a sixth of the worker's CPU. With these, and the start-up objects
frozen, 0.11 s (docs/DESIGN_DECISIONS.md 48). Cycles are still collected, by all three
generations, only in larger steps."""


def load_registry(spec: str, app_dir: str | None = ".") -> Registry:
    """Import ``module:attribute`` and return the Registry found there.

    ``app_dir`` (the current directory by default, as uvicorn and celery do) goes first on
    the import path, so ``--app myapp.tasks:registry`` finds ./myapp/tasks.py. Raises
    ValueError with a sentence for a person when the spec is wrong or the import fails.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"--app must look like module:registry, got {spec!r}")
    if app_dir is not None:
        folder = str(Path(app_dir).resolve())
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        where = f" (looked in {app_dir!r} and the installed packages)" if app_dir else ""
        raise ValueError(f"--app {spec}: no module named {exc.name!r}{where}") from None
    registry = getattr(module, attribute, None)
    if registry is None:
        raise ValueError(f"--app {spec}: module {module_name!r} has no {attribute!r}")
    if not isinstance(registry, Registry):
        raise ValueError(f"--app {spec}: {attribute!r} is not a codity.worker.Registry")
    return registry


def run_worker(url: str, registry: Registry, config: WorkerConfig) -> None:
    """Run until SIGTERM or SIGINT, then drain and return (the process exits 0)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await Worker(url, registry, config).run(stop)

    # Imports and the registry live as long as the process: out of the collector's scans.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    asyncio.run(main())
