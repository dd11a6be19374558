"""``codity bench --against graphile-worker|pg-boss|all`` runs each peer end to end.

Performance is measured by the command, never asserted here. What is proven: a tiny run of
each Node peer (installed with npm into the bench's own folder on first use, then cached)
drains every job exactly once by the peer's own tables — the drains raise otherwise —
reports positive figures and the peer's version, and drops its scratch databases; and a
peer that cannot run (no ``node`` on PATH) is one sentence of the report while the other
systems still run. The peers' installs need the npm registry, so these are ``slow`` tests
(.ci/run); the two below them without a database are pure and fast.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest

from codity.bench._against_model import CODITY, GRAPHILE, PGBOSS, PGQUEUER, AgainstOptions
from codity.bench._boss_runs import PGBOSS_DEFAULTS_JOBS
from codity.bench._node_env import GRAPHILE_PEER, PGBOSS_PEER, PeerUnavailable, ensure_node_peer
from codity.bench._peers_report import render_peers
from codity.bench.against_peers import peer_configurations, run_peers
from codity.config import load_settings
from codity.supervisor import codity_command

TINY = AgainstOptions(
    jobs=200,
    rounds=1,
    enqueue_single=20,
    enqueue_batched=2_000,
    enqueue_batch=1_000,
    pickup_samples=3,
    quick=True,
)
HOME = load_settings().home
"""The peers' installs are cached where ``codity bench`` keeps them (<CODITY_HOME>/bench)."""


def _scratch_left(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'codity_bench%'"
        ).fetchall()
    return [str(r[0]) for r in rows]


@pytest.mark.slow  # npm install on first use, then a tiny run of both systems: ~20-40 s each
@pytest.mark.parametrize(("system", "version"), [(GRAPHILE, "0.17.3"), (PGBOSS, "10.4.2")])
def test_tiny_run_drains_every_job_once_and_reports_the_peer(
    pg_server_url: str, system: str, version: str
) -> None:
    report = run_peers(pg_server_url, HOME, TINY, (system,))

    assert report.versions == ((system, version),)
    assert report.unavailable == ()
    assert {s.config.system for s in report.series} == {CODITY, system}
    for s in report.series:
        pgboss_defaults = s.config.system == PGBOSS and s.config.default
        expected = PGBOSS_DEFAULTS_JOBS if pgboss_defaults else TINY.jobs
        assert [r.jobs for r in s.runs] == [expected], s.config
        assert s.per_second > 0 and s.wal_per_job > 0, s
    for peer in (CODITY, system):
        assert report.enqueue(peer, 1) > 0 and report.enqueue(peer, TINY.enqueue_batch) > 0
        pickup = report.pickup(peer)
        assert len(pickup.total_ms) == TINY.pickup_samples
        assert 0 < pickup.p(50) <= pickup.p(99)
    text = render_peers(report, command="test")
    assert f"{system} {version}" in text
    assert "theirs, not ours" in text
    assert _scratch_left(pg_server_url) == [], "a scratch database was not dropped"


def _path_without_node(tmp_path: Path) -> str:
    """A PATH holding every program of this one but node, npm and npx (symlinks)."""
    farm = tmp_path / "bin"
    farm.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            target = farm / entry.name
            if entry.name not in {"node", "npm", "npx", "corepack"} and not target.exists():
                target.symlink_to(entry.path)
    return str(farm)


@pytest.mark.slow  # a quick run of Codity and PGQueuer (PGQueuer installed on first use)
def test_a_peer_without_node_is_one_sentence_and_the_others_run(
    pg_server_url: str, tmp_path: Path
) -> None:
    env = os.environ | {
        "DATABASE_URL": pg_server_url,
        "CODITY_HOME": str(HOME),
        "PATH": _path_without_node(tmp_path),
        "WORKER_POLL_INTERVAL_MS": "200",
    }
    run = subprocess.run(
        [*codity_command(), "bench", "--against", "all", "--quick", "--jobs", "200", "--no-write"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-5000:]
    for peer in (GRAPHILE_PEER, PGBOSS_PEER):
        sentence = f"- {peer.system} {peer.version} was not run: no `node` on PATH.\n"
        assert sentence in run.stdout, run.stdout
    header = run.stdout.splitlines()[0]
    assert f"| {PGQUEUER} 1.6." in header and GRAPHILE not in header, header
    assert _scratch_left(pg_server_url) == [], "a scratch database was not dropped"


def test_missing_node_is_one_sentence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PeerUnavailable) as found:
        ensure_node_peer(tmp_path, PGBOSS_PEER)
    assert str(found.value) == "pg-boss 10.4.2 was not run: no `node` on PATH."
    assert not (tmp_path / "bench").exists(), "nothing is installed without node"


def test_each_peer_has_tuned_drains_at_both_process_counts_and_its_defaults() -> None:
    for system in (GRAPHILE, PGBOSS):
        for quick in (True, False):
            configs = peer_configurations(system, quick)
            assert len(set(configs)) == len(configs)
            assert {c.system for c in configs} == {system}
            assert [c.default for c in configs].count(True) == 1 and configs[-1].default
            assert {c.processes for c in configs if not c.default} == {1, 2}
    graphile = peer_configurations(GRAPHILE, quick=True)
    assert graphile[0].label == "concurrency 24, local queue 500, batched completion"
    assert graphile[-1].label == "concurrency 1, defaults"
    assert peer_configurations(PGBOSS, quick=True)[-1].label == (
        "batchSize 1, 1 work() loop, poll 2 s, defaults"
    )
