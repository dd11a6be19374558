"""``codity worker``: load the app's registry and run a worker until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import importlib
import signal

from codity.worker.registry import Registry
from codity.worker.runtime import Worker, WorkerConfig

__all__ = ["load_registry", "run_worker"]


def load_registry(spec: str) -> Registry:
    """Import ``module:attribute`` and return the Registry found there."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"--app must look like module:registry, got {spec!r}")
    registry = getattr(importlib.import_module(module_name), attribute, None)
    if not isinstance(registry, Registry):
        raise ValueError(f"{spec} is not a codity.worker.Registry")
    return registry


def run_worker(url: str, registry: Registry, config: WorkerConfig) -> None:
    """Run until SIGTERM or SIGINT, then drain and return (the process exits 0)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await Worker(url, registry, config).run(stop)

    asyncio.run(main())
