"""``codity bench --citus``'s tables, scaling model, and its block of docs/PERFORMANCE.md.

The section "Codity on Citus" is partly written by hand (what the figures mean, what was
found); the command rewrites only what lies between its BEGIN and END markers, and
appends the section with a short heading when it is missing.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from pathlib import Path

from codity.bench._model import Pickup, percentile
from codity.bench._report import write_section
from codity.bench.citus_model import CITUS, PLAIN, CitusReport, DrainRound, MultiTask, NodeSpent

__all__ = ["BEGIN", "END", "HEADING", "render_block", "render_citus", "write_citus"]

BEGIN = "<!-- BEGIN codity bench citus: generated; rerun `./codity bench --citus` -->"
END = "<!-- END codity bench citus -->"
HEADING = "## Codity on Citus (issue 24)"
TARGET_RATIO = 0.8
TARGET_PICKUP_P99 = 2.0
X = "\N{MULTIPLICATION SIGN}"
MU = "\N{MICRO SIGN}"
_TEXT = 110
"""Statements are shown cut to this many characters."""


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _us(seconds: float | None, jobs: int) -> str:
    return "n/a" if seconds is None or jobs == 0 else f"{seconds / jobs * 1e6:,.1f} {MU}s"


def _per(count: float, jobs: int) -> str:
    if not jobs:
        return "n/a"
    value = count / jobs
    return f"{value:.3f}" if value >= 0.01 or value == 0 else f"{value:.5f}"


def _kb(wal: int, jobs: int) -> str:
    return f"{wal / jobs / 1000:.2f} kB" if jobs else "n/a"


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def _cut(text: str) -> str:
    return text if len(text) <= _TEXT else text[: _TEXT - 1] + "\N{HORIZONTAL ELLIPSIS}"


def _code(text: str) -> str:
    return "`" + _cut(text).replace("`", "'").replace("|", "\\|") + "`"


def _shape(statement: str) -> str:
    """A statement with its literal values as ``?``: a delegated call is logged with them."""
    without = re.sub(r"'(?:[^']|'')*'(?:::[\w. ]+?(?:\[\])?(?=[,)\s]))?", "?", statement)
    return re.sub(r"(?<![\w$])-?\d+(?:\.\d+)?(?![\w])", "?", without)


def _inside(context: str) -> str:
    """``codity._dead_letter ← codity.fail_in_queue: INSERT ...`` from a CONTEXT line."""
    functions = re.findall(r"PL/pgSQL function ([\w.]+)\(", context)
    statement = re.search(r'SQL statement "(.*?)"(?: PL/pgSQL|$)', context)
    where = " ← ".join(functions) if functions else "?"
    return f"{where}: {statement[1]}" if statement else where


def _grouped(found: tuple[MultiTask, ...] | list[MultiTask]) -> str:
    """The multi-shard statements as a table, the same statement and function counted once."""
    grouped: dict[tuple[str, str, str], int] = defaultdict(int)
    for m in found:
        grouped[(m.node, _shape(m.statement), _inside(_shape(m.context)))] += 1
    lines = ["| Node | Times | Statement | Inside |", "| --- | ---: | --- | --- |"]
    lines += [
        f"| {node} | {count} | {_code(statement)} | {_code(context) if context else ''} |"
        for (node, statement, context), count in sorted(grouped.items(), key=lambda x: -x[1])
    ]
    return "\n".join(lines)


def _latency(p: Pickup) -> str:
    return f"{p.p50:.2f} / {p.p99:.2f} ms"


def _first(samples: tuple[float, ...]) -> str:
    if not samples:
        return "n/a"
    return f"{statistics.median(samples):.2f} ms (" + ", ".join(f"{x:.1f}" for x in samples) + ")"


def _pair(samples: tuple[float, ...]) -> str:
    return f"{percentile(samples, 50):.2f} / {percentile(samples, 99):.2f} ms"


def _held(r: CitusReport) -> dict[str, list[str]]:
    held: dict[str, list[str]] = defaultdict(list)
    for p in r.placements:
        held[p.node].append(p.queue)
    return held


def _jobs_held(r: CitusReport, node: str, jobs: int) -> int:
    """Jobs of the queues a worker node holds; every job for the coordinator and plain."""
    held = _held(r)
    if node not in held:
        return jobs
    return jobs * len(held[node]) // r.options.queues


def _summary(r: CitusReport) -> str:
    plain, citus = r.median(PLAIN), r.median(CITUS)
    pp, pc = r.pickups[PLAIN], r.pickups[CITUS]
    entry_p, entry_c = plain.node("plain"), citus.node("coordinator")
    rows = [
        (f"Drain of {_n(plain.jobs)} jobs over {r.options.queues} queues, jobs/s "
         f"(median of {len(r.rounds(PLAIN))} round(s))",
         _n(plain.per_second), _n(citus.per_second),
         f"**{r.ratio:.2f}** (median of the rounds' ratios)"),
        ("Every round, jobs/s, in order",
         ", ".join(_n(d.per_second) for d in r.rounds(PLAIN)),
         ", ".join(_n(d.per_second) for d in r.rounds(CITUS)),
         ", ".join(f"{x:.2f}" for x in r.ratios)),
        ("PostgreSQL CPU per job, every server of the side",
         _us(plain.cpu_s, plain.jobs), _us(citus.cpu_s, citus.jobs),
         _ratio(citus.cpu_s, plain.cpu_s)),
        ("Worker processes' CPU per job", _us(plain.workers_cpu_s, plain.jobs),
         _us(citus.workers_cpu_s, citus.jobs), _ratio(citus.workers_cpu_s, plain.workers_cpu_s)),
        ("WAL per job, every server of the side", _kb(plain.wal_bytes, plain.jobs),
         _kb(citus.wal_bytes, citus.jobs), _ratio(citus.wal_bytes, plain.wal_bytes)),
        ("Statements per job the workers sent (plain server / coordinator)",
         _per(entry_p.toplevel_calls, plain.jobs), _per(entry_c.toplevel_calls, citus.jobs),
         _ratio(entry_c.toplevel_calls, entry_p.toplevel_calls)),
        ("Statements per job run inside functions there",
         _per(entry_p.nested_calls, plain.jobs), _per(entry_c.nested_calls, citus.jobs),
         _ratio(entry_c.nested_calls, entry_p.nested_calls)),
        ("Jobs per claim call", f"{plain.jobs / max(plain.claims, 1):.1f}",
         f"{citus.jobs / max(citus.claims, 1):.1f}", ""),
        ("Pickup p50 / p99 with NOTIFY, from the enqueue's commit",
         _latency(pp), _latency(pc), f"{pc.p50 / pp.p50:.2f} / {pc.p99 / pp.p99:.2f}"),
        ("Of which: enqueue's commit to the claim statement's start, p50 / p99",
         _pair(pp.wake_ms), _pair(pc.wake_ms),
         f"{percentile(pc.wake_ms, 50) / percentile(pp.wake_ms, 50):.2f} / "
         f"{percentile(pc.wake_ms, 99) / percentile(pp.wake_ms, 99):.2f}"),
        ("A worker's first job after it starts: median of the rounds (left out above)",
         _first(r.first_pickups[PLAIN]), _first(r.first_pickups[CITUS]),
         _ratio(statistics.median(r.first_pickups[CITUS]) if r.first_pickups[CITUS] else None,
                statistics.median(r.first_pickups[PLAIN]) if r.first_pickups[PLAIN] else None)),
        ("The enqueue's own round trip, p50 (a durable commit)",
         f"{percentile(pp.commit_ms, 50):.2f} ms", f"{percentile(pc.commit_ms, 50):.2f} ms",
         f"{percentile(pc.commit_ms, 50) / percentile(pp.commit_ms, 50):.2f}"),
    ]  # fmt: skip
    lines = [f"| | Plain PostgreSQL 18 | Citus {r.citus_version}, coordinator + "
             f"{len(r.median(CITUS).nodes) - 1} workers | Citus / plain |",
             "| --- | ---: | ---: | ---: |"]  # fmt: skip
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def _node_rows(r: CitusReport, d: DrainRound) -> list[str]:
    held = _held(r)
    rows = []
    for n in d.nodes:
        if n.node == "plain":
            holds = f"all {r.options.queues} queues"
        elif n.node == "coordinator":
            holds = "no shards (reference tables only); every client connects here"
        else:
            queues = held.get(n.node, [])
            holds = f"{len(queues)} queue(s): " + ", ".join(queues) if queues else "no queue"
        own = _jobs_held(r, n.node, d.jobs)
        rows.append(
            f"| {n.node} | {holds} | {_us(n.cpu_s, d.jobs)} | {_us(n.cpu_s, own)} | "
            f"{_kb(n.wal_bytes, d.jobs)} | {_per(n.toplevel_calls, d.jobs)} | "
            f"{_per(n.nested_calls, d.jobs)} | {_per(n.prepared, d.jobs)} | {len(n.multi_task)} |"
        )
    return rows


def _per_node(r: CitusReport) -> str:
    lines = [
        "| Server | Holds | CPU per job (all jobs) | CPU per job it holds | WAL per job | "
        "Statements received per job | Statements inside functions per job | "
        "Two-phase commits per job | Multi-shard statements |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += _node_rows(r, r.median(PLAIN)) + _node_rows(r, r.median(CITUS))
    return "\n".join(lines)


def _top(n: NodeSpent, jobs: int, count: int = 8) -> list[str]:
    return [
        f"| {n.node} | {'top' if s.toplevel else 'nested'} | {_n(s.calls)} | "
        f"{_per(s.calls, jobs)} | {_code(s.query)} |"
        for s in n.statements[:count]
    ]


def _statements(r: CitusReport) -> str:
    lines = [
        "| Server | Level | Calls | Per job | Statement |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for d in (r.median(PLAIN), r.median(CITUS)):
        for n in d.nodes:
            lines += _top(n, d.jobs)
    return "\n".join(lines)


def _multi_shard(r: CitusReport) -> str:
    rounds = r.rounds(CITUS)
    found = [m for d in rounds for m in d.multi_task]
    jobs = sum(d.jobs for d in rounds)
    head = (
        f"**{len(found)} multi-shard statement(s)** in {len(rounds)} Citus drain(s) of "
        f'{_n(jobs)} jobs in all: the lines "multi-task query about to be executed" that '
        "`citus.multi_task_query_log_level = log` wrote to the logs of the coordinator and "
        "both worker nodes between the resume of the queues and the last completion "
        "(statements from the workers and statements run inside functions, on every node)."
    )
    parts = [head]
    if found:
        parts.append(_grouped(found))
    median = r.median(CITUS)
    unkeyed = sum(s.calls for s in median.unkeyed)
    parts.append(
        f"`citus_stat_statements` on the coordinator, median round: "
        f"{_n(median.router_or_delegated)} call(s) carried a distribution key value (router "
        f"statements), {_n(unkeyed)} none. No key is not the same as multi-shard: a delegated "
        "function call and a statement on reference tables have none, which is why the log "
        "above is the proof. Statements without a key:"
    )
    lines = ["| Calls per job | Statement |", "| ---: | --- |"]
    lines += [f"| {_per(s.calls, median.jobs)} | {_code(s.query)} |" for s in median.unkeyed[:8]]
    parts.append("\n".join(lines))
    return "\n\n".join(parts)


_HOT_CALLS = (
    ("claims (`claim_in_queue`, jobs started at once)", "codity.claim_in_queue("),
    ("completion batches (`complete_many_in_queue`)", "codity.complete_many_in_queue("),
    ("failures (`fail_in_queue`)", "codity.fail_in_queue("),
    ("heartbeats (`heartbeat`)", "codity.heartbeat("),
    ("queue limits read again (`worker_queues`)", "codity.worker_queues("),
)


def _coverage(r: CitusReport) -> str:
    d = r.coverage
    if d is None:
        return "Not run."
    coord = d.node("coordinator")
    calls = ", ".join(f"{coord.calls_containing(text):,} {what}" for what, text in _HOT_CALLS)
    found = d.multi_task
    head = (
        f"One more drain on the cluster, not timed: {_n(d.jobs)} jobs and {d.failing} of a task "
        f"no handler serves (one attempt: failed, then a dead letter), the workers "
        f"heartbeating every {d.heartbeat_ms} ms (`WORKER_HEARTBEAT_MS`) so that the window "
        f"holds the whole hot path. The workers sent the coordinator {calls}. "
        f"**{len(found)} multi-shard statement(s)**."
    )
    return head + "\n\n" + _grouped(found) if found else head


def _targets(r: CitusReport) -> str:
    pp, pc = r.pickups[PLAIN], r.pickups[CITUS]
    found = sum(len(d.multi_task) for d in r.rounds(CITUS))
    covered = len(r.coverage.multi_task) if r.coverage else 0

    def verdict(ok: bool) -> str:
        return "pass" if ok else "**miss**"

    rows = [
        (f"Drain on Citus ≥ {TARGET_RATIO}{X} plain PostgreSQL's, same machine",
         f"{r.ratio:.2f}{X}", r.ratio >= TARGET_RATIO),
        (f"Pickup p99 on Citus within {TARGET_PICKUP_P99:.0f}{X} plain PostgreSQL's",
         f"{pc.p99:.2f} vs {pp.p99:.2f} ms ({pc.p99 / pp.p99:.2f}{X})",
         pc.p99 <= TARGET_PICKUP_P99 * pp.p99),
        ("Zero multi-shard statements in the hot path: the timed drains; the coverage drain",
         f"{found}; {covered}", found == covered == 0),
    ]  # fmt: skip
    lines = ["| Target (issue 24) | Measured | Verdict |", "| --- | ---: | --- |"]
    lines += [f"| {a} | {b} | {verdict(ok)} |" for a, b, ok in rows]
    return "\n".join(lines)


def _model(r: CitusReport) -> str:
    d, p = r.median(CITUS), r.median(PLAIN)
    coord = d.node("coordinator")
    workers = [n for n in d.nodes if n.node != "coordinator"]
    if coord.cpu_s is None or p.cpu_s is None or any(n.cpu_s is None for n in workers):
        return "No CPU figures (the servers' /proc was not readable): no model."
    c_us = coord.cpu_s / d.jobs * 1e6
    plain_us = p.cpu_s / p.jobs * 1e6
    total_us = (d.cpu_s or 0) / d.jobs * 1e6
    held = {n.node: _jobs_held(r, n.node, d.jobs) for n in workers}
    w_us = {n.node: (n.cpu_s or 0) / max(held[n.node], 1) * 1e6 for n in workers}
    per_node = "; ".join(f"{name} {us:,.0f} {MU}s per job it holds" for name, us in w_us.items())
    worst = max(w_us.values()) if w_us else 0.0
    per_statement = coord.cpu_s / max(coord.toplevel_calls, 1) * 1e6
    sent = sum(n.toplevel_calls for n in workers) / d.jobs
    twopc = sum(n.prepared for n in workers) / d.jobs
    lines = [
        f"- **The coordinator, per job**: {c_us:,.0f} {MU}s of CPU; "
        f"{coord.toplevel_calls / d.jobs:.3f} statements received from the workers and "
        f"{coord.nested_calls / d.jobs:.3f} run inside functions on it (a body that runs "
        "there, not delegated, runs its statements there and sends each to the shard's "
        f"node); {sent:.3f} statements arrived at the worker nodes per job (delegated calls, "
        f"routed statements, transaction control), {twopc:.3f} of them `PREPARE "
        f"TRANSACTION`; WAL {_kb(coord.wal_bytes, d.jobs)} per job. Its work goes by "
        f"statement, not by job: about {per_statement:,.0f} {MU}s per statement received "
        f"(planning the delegation, a round trip to the node, passing the rows back; its "
        f"background work and the bench's polling included), at "
        f"{d.jobs / max(d.claims, 1):,.0f} jobs per claim here; smaller claims (a worker's "
        "default concurrency of 5) mean more statements, and more coordinator work, per job.",
        f"- **Each worker node, per job of the queues it holds**: {per_node}; WAL "
        + "; ".join(f"{n.node} {_kb(n.wal_bytes, held[n.node])}" for n in workers)
        + ".",
        f"- **Plain PostgreSQL**: {plain_us:,.0f} {MU}s per job, WAL "
        f"{_kb(p.wal_bytes, p.jobs)}. The cluster as a whole: {total_us:,.0f} {MU}s per job, "
        f"{total_us / plain_us:.2f}{X} plain's. Sharing two cores, the servers' CPU alone "
        f"bounds the ratio near {plain_us / total_us:.2f} (measured {r.ratio:.2f}; the "
        "worker processes share the same cores).",
        f"- **On machines of their own** (CPU only; network round trips add latency, not "
        f"work): a coordinator core carries about {1e6 / c_us:,.0f} jobs/s, a worker-node "
        f"core about {1e6 / worst:,.0f} jobs/s of its queues, and one plain server core "
        f"about {1e6 / plain_us:,.0f} jobs/s. Throughput ≈ min(coordinator cores {X} "
        f"{1e6 / c_us:,.0f}, worker nodes {X} cores {X} {1e6 / worst:,.0f}): worker nodes "
        "add capacity until the coordinator's share is the limit; a coordinator doing "
        f"{c_us:,.0f} {MU}s per job is a {plain_us / c_us:.1f}{X} larger ceiling than one "
        "plain server, for the same cores.",
    ]
    return "\n".join(lines)


def _settings(r: CitusReport) -> str:
    servers = {s.name: s for s in r.servers}
    plain = servers["plain"]
    shown = ("fsync", "synchronous_commit", "full_page_writes", "shared_buffers",
             "max_wal_size", "wal_level", "autovacuum", "max_connections",
             "max_prepared_transactions", "pg_stat_statements.track")  # fmt: skip
    values = dict(plain.settings)
    line = ", ".join(f"`{k}` {values[k]}" for k in shown if k in values)
    differ = []
    for s in r.servers:
        if s.name == "plain":
            continue
        other = dict(s.settings)
        changed = [k for k in values
                   if k != "shared_preload_libraries" and other.get(k) != values[k]]  # fmt: skip
        if changed:
            differ.append(f"{s.name}: " + ", ".join(f"`{k}` {other.get(k)}" for k in changed))
    coordinator = dict(servers["coordinator"].settings) if "coordinator" in servers else {}
    citus_line = ", ".join(f"`{k}` {v}" for k, v in coordinator.items() if k.startswith("citus."))
    o = r.options
    load = ", ".join(f"{x:.2f}" for x in r.load_before)
    after = ", ".join(f"{x:.2f}" for x in r.load_after)
    return "\n".join([
        f"- Command: `{r.command}`. Started {r.started_at}, took {r.seconds:.0f} s; Codity at "
        f"commit {r.commit}"
        + (" (`--quick`: a few hundred jobs, one round; figures are rough)" if o.quick else "")
        + ".",
        f"- Machine: {r.cpus} {X} {r.cpu_model}, {r.memory_gib:.1f} GiB; load average {load} "
        f"before, {after} after. The four servers, the worker processes and the bench share "
        "these cores; other work on the machine moves the figures.",
        f"- {plain.version}; Citus {r.citus_version}; {r.python}.",
        f"- Every server: {line}"
        + ("; the same on each node of the cluster" if not differ else "; differing: "
           + "; ".join(differ)) + ". `shared_preload_libraries`: plain "
        f"`{values.get('shared_preload_libraries', '')}`, cluster "
        f"`{coordinator.get('shared_preload_libraries', '')}`; on the cluster's nodes "
        f"{citus_line}.",
        f"- Drain: {_n(o.total_jobs)} `bench.pickup` jobs per drain, {_n(o.per_queue)} in each "
        f"of {o.queues} queues, enqueued in batches of 1,000 into paused queues (then `VACUUM "
        f"ANALYZE`); {o.workers} `codity worker --app codity.bench.tasks:registry` processes, "
        f"each on all {o.queues} queues, concurrency {o.concurrency}; the queues resumed once "
        "every worker listens; time from the first claim to the last completion on the "
        f"database's clock; {o.rounds} round(s), plain then Citus; medians. CPU: /proc, every "
        "process of each server's postmaster, and the worker processes; WAL: "
        "`pg_current_wal_insert_lsn()` of each server; statements: `pg_stat_statements` of "
        "each server, reset before the queues are resumed, read after the last completion; "
        "the bench's own polling left out.",
        "- Queues on the cluster: "
        + "; ".join(f"{node} {', '.join(qs)}" for node, qs in sorted(_held(r).items()))
        + " (shard groups by the hash of the queue id).",
        f"- Pickup: {o.pickup_samples} jobs per side, spread over the rounds (plus one per round: "
        "the first job of each round's new worker, reported apart), enqueued one at "
        "a time with `codity.enqueue`, 10 to 50 ms apart, to one idle `codity worker` "
        f"listening (concurrency {o.concurrency}); from the enqueue's acknowledged commit to "
        "the handler's first line, same clock.",
    ])  # fmt: skip


def render_citus(r: CitusReport) -> str:
    return "\n\n".join([
        "### Drain and pickup: plain PostgreSQL against the cluster, same machine\n\n"
        + _summary(r),
        "### Targets\n\n" + _targets(r),
        "### Per server, median round of each side\n\n" + _per_node(r),
        "### Multi-shard statements during the drains\n\n" + _multi_shard(r),
        "### The whole hot path: failures and heartbeats too\n\n" + _coverage(r),
        "### The most frequent statements per server, median round\n\n" + _statements(r),
        "### Scaling model, from these figures\n\n" + _model(r),
        "### Machine, settings, versions\n\n" + _settings(r),
    ])  # fmt: skip


def render_block(r: CitusReport) -> str:
    rerun = "Generated by `./codity bench --citus`; do not edit by hand."
    return "\n\n".join([BEGIN, rerun, render_citus(r), END])


def write_citus(r: CitusReport, path: Path | None = None) -> Path:
    """Replace this command's block of docs/PERFORMANCE.md, or append the section."""
    return write_section(render_block(r), BEGIN, END, HEADING, path)
