"""The overview: the project's queues at a glance, live; and the bar charts the queue screens
share.

Reads ``GET /api/v1/overview`` only. The fragment is what the page re-renders: on a NOTIFY
(``codity:changed``) and on every tick (``codity:tick``), since completions, dead letters
and worker liveness change without one; the template throttles both to one render per
~2 s (see templates/overview.html).

A chart is drawn on the server as SVG bars (``macros/chart.html``): this module turns
per-minute points into bars with their geometry, CSS class and hover text, and a sentence
that says what the chart shows for people who cannot see it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from starlette.responses import Response

from codity.web.dashboard.page import Page, PageContext

__all__ = ["PAGES", "THROUGHPUT", "Bar", "Chart", "Series", "bar_chart", "label_minutes"]


@dataclass(frozen=True, slots=True)
class Series:
    key: str
    css: str
    label: str


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    id: str
    title: str
    summary: str
    """What the chart shows, in words (its SVG ``desc``): totals or the latest and peak."""
    caption: str
    """The same, short, shown under the chart."""
    width: int
    height: int
    bars: tuple[Bar, ...]


THROUGHPUT = (Series("completed", "done", "completed"), Series("failed", "failed", "failed"))

_SLOT = 10  # viewBox units per point; the SVG stretches to its box (preserveAspectRatio none)
_GAP = 2


def _hhmm(value: Any) -> str:
    moment = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return moment.astimezone(dt.UTC).strftime("%H:%M")


def label_minutes(points: Sequence[Mapping[str, Any]], span: int = 1) -> list[dict[str, Any]]:
    """Each point with a ``label`` for people: "12:34 UTC", or "12:30 to 12:32 UTC" for a point
    that stands for ``span`` minutes."""
    labelled = []
    for point in points:
        label = _hhmm(point["minute"])
        if span > 1:
            label += " to " + _hhmm(point.get("last_minute", point["minute"]))
        labelled.append({**point, "label": f"{label} UTC"})
    return labelled


def bar_chart(
    chart_id: str,
    title: str,
    points: Sequence[Mapping[str, Any]],
    series: Sequence[Series],
    *,
    kind: Literal["sum", "level"],
    height: int = 60,
) -> Chart:
    """Stacked bars, one per point (its ``label`` names it), the ``series`` bottom-up.

    ``kind`` says how to summarise: "sum" for events per minute (totals over the chart),
    "level" for a sampled depth (the latest value and the peak). Zero segments draw nothing;
    a segment too small to see is drawn one unit high so it is not lost.
    """
    top = max((sum(int(p[s.key]) for s in series) for p in points), default=0)
    bars: list[Bar] = []
    for n, point in enumerate(points):
        base = float(height)
        for s in series:
            value = int(point[s.key])
            if value == 0:
                continue
            tall = max(1.0, round(value / top * (height - 2), 2))
            base = max(0.0, base - tall)
            bars.append(
                Bar(
                    x=n * _SLOT,
                    y=round(base, 2),
                    width=_SLOT - _GAP,
                    height=tall,
                    css=s.css,
                    title=f"{point['label']}: {value:,} {s.label}",
                )
            )
    summary, caption = _words(points, series, kind)
    return Chart(
        chart_id, title, summary, caption, max(1, len(points)) * _SLOT, height, tuple(bars)
    )


def _words(
    points: Sequence[Mapping[str, Any]], series: Sequence[Series], kind: str
) -> tuple[str, str]:
    if not points:
        return "No data.", "no data"
    if kind == "sum":
        totals = [(s, sum(int(p[s.key]) for p in points)) for s in series]
        caption = ", ".join(f"{total:,} {s.label}" for s, total in totals)
        busiest = max(points, key=lambda p: sum(int(p[s.key]) for s in series))
        peak = sum(int(busiest[s.key]) for s in series)
        if peak == 0:
            return f"Nothing {' or '.join(s.label for s in series)}.", caption
        return f"{caption}; busiest {busiest['label']} with {peak:,}.", caption
    latest = points[-1]
    now = ", ".join(f"{int(latest[s.key]):,} {s.label}" for s in series)
    lead = series[0]
    highest = max(points, key=lambda p: int(p[lead.key]))
    return (
        f"Latest ({latest['label']}): {now}. Peak {int(highest[lead.key]):,} {lead.label}"
        f" at {highest['label']}.",
        now,
    )


def _with_charts(data: dict[str, Any]) -> dict[str, Any]:
    """The overview's data with a throughput chart for each queue."""
    for n, queue in enumerate(data["queues"]):
        queue["chart"] = bar_chart(
            f"tp-{n}",
            f"{queue['queue']}: executions completed and failed per minute, last hour",
            label_minutes(queue["throughput"]),
            THROUGHPUT,
            kind="sum",
            height=30,
        )
    return data


async def _overview(ctx: PageContext) -> dict[str, Any]:
    return _with_charts(await ctx.api("GET", "/api/v1/overview"))


async def overview(ctx: PageContext) -> Response:
    return await ctx.screen(
        "overview.html",
        title="Overview",
        active="Overview",
        live=True,
        overview=await _overview(ctx),
    )


async def overview_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/overview.html", overview=await _overview(ctx))


PAGES = [
    Page("GET", "/", overview, "Overview"),
    Page("GET", "/fragments/overview", overview_fragment, "Overview (fragment)"),
]
