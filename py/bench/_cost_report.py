"""``codity bench --cost-model``'s tables, printed and written into docs/PERFORMANCE.md."""

from __future__ import annotations

from pathlib import Path

from codity.bench._cost_model import DRAIN, ENQUEUE, PHASES, SETTINGS, CostReport, PhaseCost
from codity.bench._report import write_section

__all__ = ["BEGIN", "END", "render_cost", "write_cost"]

BEGIN = "<!-- BEGIN codity bench cost model: generated; rerun `./codity bench --cost-model` -->"
END = "<!-- END codity bench cost model -->"
HEADING = "## The cost of one job, record by record (issue 28)"
_KINDS = ("inserted", "updated", "updated (HOT)", "deleted", "locked")
_RELKINDS = {"r": "table", "i": "index", "t": "TOAST", "": ""}
_TOP = 10


def _n(value: float) -> str:
    """A count per job: two decimals, three below 0.1, trailing zeros dropped."""
    text = f"{value:.3f}" if value < 0.1 else f"{value:,.2f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _b(value: float) -> str:
    return f"{value:,.0f} B"


def _versions(p: PhaseCost) -> str:
    found = p.span.row_versions()
    parts = [
        f"{_n(p.per_job(found[k]))} {k}" for k in _KINDS if p.per_job(found.get(k, 0)) >= 0.005
    ]
    return ", ".join(parts) or "none"


def _summary(r: CostReport) -> list[str]:
    rows = [
        "| System | Phase | WAL per job | of which full-page images | Statements per job "
        "| Transactions per job | Row versions per job | Index entries per job |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for system in r.systems:
        for phase in PHASES:
            p = r.phase(system, phase)
            if p is None:
                continue
            label = f"{phase} ({p.config})" if p.config else phase
            statements = "n/a" if p.statements is None else _n(p.per_job(p.statements))
            rows.append(
                f"| {system} | {label} | {_b(p.per_job(p.wal_bytes))} "
                f"| {_b(p.per_job(p.span.fpi_bytes))} | {statements} "
                f"| {_n(p.per_job(p.span.commits))} | {_versions(p)} "
                f"| {_n(p.per_job(p.span.index_entries()))} |"
            )
    return rows


def _lifecycle(r: CostReport) -> list[str]:
    rows = [
        "| System | WAL per job, enqueue (batched) + drain | without full-page images "
        "| Row versions per job | Index entries per job |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for system in r.systems:
        enqueue, drain = r.phase(system, PHASES[1]), r.phase(system, DRAIN)
        if enqueue is None or drain is None:
            continue
        wal = enqueue.per_job(enqueue.wal_bytes) + drain.per_job(drain.wal_bytes)
        fpi = enqueue.per_job(enqueue.span.fpi_bytes) + drain.per_job(drain.span.fpi_bytes)
        versions = sum(p.per_job(sum(v for k, v in p.span.row_versions().items() if k != "locked"))
                       for p in (enqueue, drain))  # fmt: skip
        entries = sum(p.per_job(p.span.index_entries()) for p in (enqueue, drain))
        rows.append(f"| {system} | {_b(wal)} | {_b(wal - fpi)} | {_n(versions)} "
                    f"| {_n(entries)} |")  # fmt: skip
    return rows


def _by_relation(p: PhaseCost, top: int = _TOP) -> list[str]:
    rows = [
        f"**{p.system}, {p.phase}**" + (f" ({p.config})" if p.config else "") + ", per job:",
        "",
        "| Relation | Kind | WAL | Records | Row versions | Index entries |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for rel, kind, size, records, versions, entries in p.span.by_relation()[:top]:
        if size == 0:
            continue
        name = {"": "(no relation: commits and the like)", "*": "(another database)"}.get(rel, rel)
        rows.append(f"| `{name}` | {_RELKINDS.get(kind, kind)} | {_b(p.per_job(size))} "
                    f"| {_n(p.per_job(records))} | {_n(p.per_job(versions))} "
                    f"| {_n(p.per_job(entries))} |")  # fmt: skip
    return rows


def render_cost(r: CostReport, command: str) -> str:
    parts = ["\n".join(_summary(r)), "### From enqueue to completion", "\n".join(_lifecycle(r)),
             "### Where each system writes"]  # fmt: skip
    for system in r.systems:
        for phase, top in ((DRAIN, _TOP), (ENQUEUE, 6)):
            p = r.phase(system, phase)
            if p is not None:
                parts.append("\n".join(_by_relation(p, top)))
    versions = ", ".join(f"{s} {v}" for s, v in r.versions)
    missing = [f"- {reason}" for _, reason in r.unavailable]
    m = r.machine
    settings = ", ".join(f"`{s}`" for s in SETTINGS)
    parts.append("\n".join([
        "### Machine and settings",
        "",
        f"- `{command}`; started {r.started_at}, took {r.seconds:.0f} s; Codity at commit "
        f"{r.commit}; {versions or 'no peer'}.",
        f"- Machine: {m.cpus} x {m.cpu_model}, {m.memory_gib:.1f} GiB; {m.postgres}.",
        f"- A server started for the run: {settings}. A `CHECKPOINT` before every phase.",
        f"- {r.options.single:,} jobs enqueued one by one; {r.options.jobs:,} jobs enqueued "
        "1,000 per call, then drained by two worker processes.",
        *missing,
    ]))  # fmt: skip
    return "\n\n".join(parts)


def write_cost(r: CostReport, command: str, path: Path | None = None) -> Path:
    rerun = f"Generated by `{command}`; do not edit by hand."
    block = "\n\n".join([BEGIN, rerun, render_cost(r, command), END])
    return write_section(block, BEGIN, END, HEADING, path)
