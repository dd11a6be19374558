"""The Node.js peers of ``codity bench --against``: installed into the bench's own space.

Graphile Worker and pg-boss are npm packages. Each is installed, at a pinned version, with
``npm install --prefix`` into a folder of its own under ``<CODITY_HOME>/bench/node/``
(never Codity's dependencies, never in the repository), on first use. The bench drives it
through small scripts of ours (``codity/bench/node/*.mjs``, package data), copied into that
folder on every run so that Node resolves the peer's package beside them (an ES module
finds its imports from where it lies; NODE_PATH does not apply to them).

A peer that cannot be had (no ``node`` or ``npm`` on PATH, a Node older than the package
needs, an ``npm install`` that fails, e.g. with no registry) raises ``PeerUnavailable``
whose message is one sentence for the report; the other systems still run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codity.bench._workers import BenchError

__all__ = ["NODE_PEERS", "NodeEnv", "NodePeer", "PeerUnavailable", "ensure_node_peer"]

log = logging.getLogger(__name__)


class PeerUnavailable(BenchError):
    """A peer could not be installed or run here; the message is one sentence."""


@dataclass(frozen=True, slots=True)
class NodePeer:
    """One npm package the bench compares with, and the script of ours that drives it."""

    system: str
    package: str
    version: str
    """Pinned: the newest release that runs on Node 20 (the machines' Node)."""
    script: str
    """The file of ours in codity/bench/node/ that runs its workers and its producer."""
    node_major: int
    """The oldest Node major the package's ``engines`` accepts."""


COMMON = "_bench.mjs"
"""What both scripts share: arguments, the clock, the start line, the result file."""
GRAPHILE_PEER = NodePeer("Graphile Worker", "graphile-worker", "0.17.3", "graphile_worker.mjs", 14)
PGBOSS_PEER = NodePeer("pg-boss", "pg-boss", "10.4.2", "pg_boss.mjs", 20)
NODE_PEERS = (GRAPHILE_PEER, PGBOSS_PEER)


@dataclass(frozen=True, slots=True)
class NodeEnv:
    """An installed peer: its npm prefix (the script sits beside its node_modules)."""

    peer: NodePeer
    prefix: Path
    node: str
    version: str
    """As read from the installed package.json."""

    @property
    def script(self) -> Path:
        return self.prefix / self.peer.script

    def command(self, *args: str) -> list[str]:
        return [self.node, str(self.script), *args]

    def env(self, dsn: str, **extra: str) -> dict[str, str]:
        """The process environment: the scratch database's URL, and Node's quiet flags."""
        return os.environ | {"BENCH_DSN": dsn, "NO_LOG_SUCCESS": "1"} | extra

    def client(self, dsn: str, *args: str, timeout: float = 900) -> dict[str, Any]:
        """Run the script's producer (``enqueue``, ``pickup``, ``install``); its JSON line."""
        run = subprocess.run(self.command(*args), env=self.env(dsn), cwd=self.prefix,
                             capture_output=True, text=True, timeout=timeout,
                             check=False)  # fmt: skip
        if run.returncode != 0:
            raise BenchError(f"{self.peer.system} client {args[0]} failed:\n"
                             f"{run.stdout[-2000:]}{run.stderr[-3000:]}")  # fmt: skip
        result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
        return result


def _first_line(text: str) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    errors = [x for x in lines if "ERR" in x or "error" in x.lower()]
    found = (errors or lines or [""])[0]
    return found[:200].rstrip(".")


def _node(peer: NodePeer) -> str:
    """The ``node`` on PATH, checked against the package's oldest Node."""
    node = shutil.which("node")
    if node is None:
        raise PeerUnavailable(f"{peer.system} {peer.version} was not run: no `node` on PATH.")
    run = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    found = re.match(r"v(\d+)\.", run.stdout.strip())
    if run.returncode != 0 or found is None:
        raise PeerUnavailable(f"{peer.system} {peer.version} was not run: `node --version` "
                              f"failed ({_first_line(run.stderr) or run.returncode}).")  # fmt: skip
    if int(found[1]) < peer.node_major:
        raise PeerUnavailable(
            f"{peer.system} {peer.version} was not run: it needs Node "
            f"{peer.node_major} or later, this is {run.stdout.strip()}."
        )
    return node


def _installed(prefix: Path, package: str) -> str | None:
    manifest = prefix / "node_modules" / package / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def ensure_node_peer(home: Path, peer: NodePeer) -> NodeEnv:
    """``peer`` installed under ``<home>/bench/node/`` on first use, our script copied in."""
    node = _node(peer)
    prefix = home / "bench" / "node" / f"{peer.package}-{peer.version}"
    version = _installed(prefix, peer.package)
    if version != peer.version:
        npm = shutil.which("npm")
        if npm is None:
            raise PeerUnavailable(f"{peer.system} {peer.version} could not be installed: no "
                                  "`npm` on PATH.")  # fmt: skip
        log.info("installing %s@%s into %s", peer.package, peer.version, prefix)
        shutil.rmtree(prefix, ignore_errors=True)
        prefix.mkdir(parents=True)
        (prefix / "package.json").write_text('{"private": true}\n')
        step = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                "--ignore-scripts", "--save-exact", f"{peer.package}@{peer.version}"]  # fmt: skip
        try:
            run = subprocess.run(step, capture_output=True, text=True, timeout=600, check=False)
        except subprocess.TimeoutExpired:
            raise PeerUnavailable(
                f"{peer.system} {peer.version} could not be installed: "
                "`npm install` ran past 10 minutes."
            ) from None
        version = _installed(prefix, peer.package)
        if run.returncode != 0 or version != peer.version:
            shutil.rmtree(prefix, ignore_errors=True)
            raise PeerUnavailable(f"{peer.system} {peer.version} could not be installed: "
                                  f"`npm install` failed ({_first_line(run.stderr)}).")  # fmt: skip
    for name in (peer.script, COMMON):
        shutil.copyfile(Path(__file__).parent / "node" / name, prefix / name)
    return NodeEnv(peer=peer, prefix=prefix, node=node, version=version)
