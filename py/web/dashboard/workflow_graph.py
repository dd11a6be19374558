"""A workflow's graph, laid out on the server for an inline SVG: no script, no graph library.

The layout is the layered drawing peers get from dagre (River UI, Hatchet), top to bottom,
in three steps (Sugiyama's, in short):

1. **Layers**: a node's layer is the longest path to it from a node without parents (Kahn's
   order, O(V + E)), so every edge points down. The workflow's own ``depth`` is the same
   number; a caller may pass layers of its own (the collapsed view passes bands of them).
2. **Order within a layer**: an edge spanning several layers is cut into one short segment
   per layer through placeholder points, then sweeps alternately down and up sort each
   layer by the barycenter (mean position) of its neighbours in the layer just swept,
   keeping the order with the fewest crossings seen (the input order included). Each sweep
   is O(V + E log E). Crossings are counted exactly, per pair of adjacent layers, as
   inversions (a Fenwick tree).
3. **Coordinates**: boxes left to right in their order with a fixed gap, each layer centred
   under the widest; an edge is a path through its placeholder points, cubic curves between
   layers. Nothing overlaps: a layer's boxes are a gap apart, layers a gap apart.

:func:`draw_workflow` turns the API's nodes and edges into what the template draws: every
node a box (up to ``FULL_VIEW_NODES``), or, past that, the collapsed view: each layer's
nodes grouped by (queue, task, status) into one box with a count, layers merged into at
most ``MAX_BANDS`` bands, and groups by (band, status) only if there would still be more
than ``MAX_GROUPS``, so a drawing holds a few hundred boxes whatever the graph.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FULL_VIEW_EDGES",
    "FULL_VIEW_NODES",
    "MAX_BANDS",
    "MAX_GROUPS",
    "Box",
    "Drawing",
    "Layout",
    "Route",
    "assign_layers",
    "count_crossings",
    "draw_workflow",
    "layout",
]

FULL_VIEW_NODES = 200
FULL_VIEW_EDGES = 2000
MAX_BANDS = 40
MAX_GROUPS = 300
NODE_W, NODE_H, GAP_X, GAP_Y = 172.0, 46.0, 24.0, 56.0
_POINT_W = 8.0  # a placeholder point's room in its layer
_MAX_POINTS = 20_000  # past this many placeholder points, long edges are drawn straight


@dataclass(frozen=True, slots=True)
class _Point:
    """Where an edge (its index) crosses a layer it does not stop at."""

    edge: int
    layer: int


@dataclass(frozen=True, slots=True)
class Box:
    key: Hashable
    layer: int
    x: float
    y: float
    width: float
    height: float


@dataclass(frozen=True, slots=True)
class Route:
    parent: Hashable
    child: Hashable
    points: tuple[tuple[float, float], ...]

    @property
    def path(self) -> str:
        """The SVG path: straight down through a layer, a cubic curve between layers."""
        (x, y), *rest = self.points
        parts = [f"M{x:.1f} {y:.1f}"]
        for nx, ny in rest:
            if nx == x:
                parts.append(f"L{nx:.1f} {ny:.1f}")
            else:
                mid = (y + ny) / 2
                parts.append(f"C{x:.1f} {mid:.1f} {nx:.1f} {mid:.1f} {nx:.1f} {ny:.1f}")
            x, y = nx, ny
        return " ".join(parts)


@dataclass(frozen=True)
class Layout:
    boxes: dict[Hashable, Box]
    routes: list[Route]
    order: list[list[Hashable]]
    """Each layer's nodes, left to right (placeholder points left out)."""
    width: float
    height: float
    crossings: int
    initial_crossings: int
    """Crossings in the input order, before any sweep."""


def assign_layers(
    nodes: Iterable[Hashable], edges: Iterable[tuple[Hashable, Hashable]]
) -> dict[Hashable, int]:
    """Each node's layer: the longest path to it from a node without parents. Edges naming
    an unknown node are ignored; nodes on a cycle (a workflow has none) go below the rest."""
    layer = dict.fromkeys(nodes, 0)
    children: dict[Hashable, list[Hashable]] = defaultdict(list)
    parents = dict.fromkeys(layer, 0)
    for parent, child in edges:
        if parent in layer and child in layer and parent != child:
            children[parent].append(child)
            parents[child] += 1
    ready = [n for n, count in parents.items() if count == 0]
    done = 0
    while done < len(ready):
        node = ready[done]
        done += 1
        for child in children[node]:
            layer[child] = max(layer[child], layer[node] + 1)
            parents[child] -= 1
            if parents[child] == 0:
                ready.append(child)
    if done < len(layer):
        below = max(layer.values(), default=0) + 1
        for node, count in parents.items():
            if count > 0:
                layer[node] = below
    return layer


def count_crossings(
    order: Sequence[Sequence[Hashable]], edges: Iterable[tuple[Hashable, Hashable]]
) -> int:
    """How many pairs of edges cross, counting edges between adjacent layers only."""
    where = {node: (i, p) for i, nodes in enumerate(order) for p, node in enumerate(nodes)}
    between: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for a, b in edges:
        if a not in where or b not in where:
            continue
        (la, pa), (lb, pb) = where[a], where[b]
        if lb == la + 1:
            between[la].append((pa, pb))
        elif la == lb + 1:
            between[lb].append((pb, pa))
    total = 0
    for layer, pairs in between.items():
        pairs.sort()
        size = len(order[layer + 1])
        tree = [0] * (size + 1)
        for seen, (_, lower) in enumerate(pairs):
            # Edges already seen start left of (or at) this one above: those ending right
            # of it below cross it.
            i, below_or_at = lower + 1, 0
            while i > 0:
                below_or_at += tree[i]
                i -= i & -i
            total += seen - below_or_at
            i = lower + 1
            while i <= size:
                tree[i] += 1
                i += i & -i
    return total


def _sweep(
    order: list[list[Hashable]],
    neighbours: Mapping[Hashable, list[Hashable]],
    layers: Iterable[int],
    step: int,
) -> None:
    """Sort each of ``layers`` (in place) by the mean position of its nodes' neighbours in
    the layer ``step`` before it; a node without such neighbours keeps its position."""
    for i in layers:
        above = {node: p for p, node in enumerate(order[i - step])}
        keyed = []
        for p, node in enumerate(order[i]):
            near = [above[n] for n in neighbours.get(node, ()) if n in above]
            keyed.append((sum(near) / len(near) if near else float(p), p, node))
        keyed.sort(key=lambda k: (k[0], k[1]))
        order[i] = [node for _, _, node in keyed]


def layout(
    nodes: Sequence[Hashable],
    edges: Sequence[tuple[Hashable, Hashable]],
    *,
    layers: Mapping[Hashable, int] | None = None,
    sweeps: int = 4,
    size: tuple[float, float] = (NODE_W, NODE_H),
    gap: tuple[float, float] = (GAP_X, GAP_Y),
) -> Layout:
    """Lay out a DAG top to bottom (see the module's docstring). ``nodes`` in the order to
    start from; an edge must point to a lower layer to be drawn (others are left out)."""
    layer = dict(layers) if layers is not None else assign_layers(nodes, edges)
    depth = max((layer[n] for n in nodes), default=-1) + 1
    order: list[list[Hashable]] = [[] for _ in range(depth)]
    for node in nodes:
        order[layer[node]].append(node)
    # Each edge as a chain of short segments through its placeholder points.
    chains: list[tuple[Hashable, Hashable, list[Hashable]]] = []
    down: dict[Hashable, list[Hashable]] = defaultdict(list)
    up: dict[Hashable, list[Hashable]] = defaultdict(list)
    points = 0
    for index, (parent, child) in enumerate(edges):
        if parent not in layer or child not in layer or layer[child] <= layer[parent]:
            continue
        span = layer[child] - layer[parent] - 1
        if span > 0 and points + span > _MAX_POINTS:
            chains.append((parent, child, [parent, child]))  # drawn straight, not ordered
            continue
        chain: list[Hashable] = [parent]
        for at in range(layer[parent] + 1, layer[child]):
            point = _Point(index, at)
            order[at].append(point)
            chain.append(point)
        chain.append(child)
        points += span
        chains.append((parent, child, chain))
        for a, b in itertools.pairwise(chain):
            down[a].append(b)
            up[b].append(a)
    segments = [(a, b) for a, bs in down.items() for b in bs]
    initial = best = count_crossings(order, segments)
    best_order = [list(o) for o in order]
    for sweep in range(sweeps):
        if best == 0:
            break
        if sweep % 2 == 0:
            _sweep(order, up, range(1, depth), 1)
        else:
            _sweep(order, down, range(depth - 2, -1, -1), -1)
        found = count_crossings(order, segments)
        if found < best:
            best, best_order = found, [list(o) for o in order]
    return _place(best_order, chains, best, initial, size, gap)


def _place(
    order: list[list[Hashable]],
    chains: list[tuple[Hashable, Hashable, list[Hashable]]],
    crossings: int,
    initial: int,
    size: tuple[float, float],
    gap: tuple[float, float],
) -> Layout:
    (w, h), (gx, gy) = size, gap

    def room(node: Hashable) -> float:
        return _POINT_W if isinstance(node, _Point) else w

    widths = [sum(room(n) for n in nodes) + gx * max(len(nodes) - 1, 0) for nodes in order]
    width = max(widths, default=0.0)
    centre: dict[Hashable, float] = {}
    boxes: dict[Hashable, Box] = {}
    for i, nodes in enumerate(order):
        x, y = (width - widths[i]) / 2, i * (h + gy)
        for node in nodes:
            centre[node] = x + room(node) / 2
            if not isinstance(node, _Point):
                boxes[node] = Box(node, i, x, y, w, h)
            x += room(node) + gx
    routes = []
    for parent, child, chain in chains:
        top = boxes[parent]
        route = [(centre[parent], top.y + h)]
        for point in chain[1:-1]:
            assert isinstance(point, _Point)
            y = point.layer * (h + gy)
            route += [(centre[point], y), (centre[point], y + h)]
        route.append((centre[child], boxes[child].y))
        routes.append(Route(parent, child, tuple(route)))
    height = len(order) * (h + gy) - gy if order else 0.0
    real = [[n for n in nodes if not isinstance(n, _Point)] for nodes in order]
    return Layout(boxes, routes, real, width, height, crossings, initial)


# ---------------------------------------------------------------------------------------
# A workflow's drawing: every node, or groups of them
# ---------------------------------------------------------------------------------------

_TONE = {
    "completed": "ok",
    "dead_letter": "bad",
    "failed": "bad",
    "claimed": "warn",
    "running": "warn",
    "cancelled": "muted",
    "queued": "queued",
    "scheduled": "queued",
}
"""A status's tone: its colour class in the dashboard's palette (waiting: idle)."""


def _short(text: str, most: int = 24) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


@dataclass(frozen=True, slots=True)
class NodeShape:
    x: float
    y: float
    width: float
    height: float
    status: str
    tone: str
    lines: tuple[str, str]
    label: str
    """What the box says to a screen reader and in its tooltip."""
    href: str


@dataclass(frozen=True, slots=True)
class EdgeShape:
    path: str
    policy: str
    """cancel, ignore, hold, run, or mixed (a collapsed bundle of several)."""
    resolved: str
    label: str


@dataclass(frozen=True)
class Drawing:
    width: float
    height: float
    collapsed: bool
    nodes: list[NodeShape]
    edges: list[EdgeShape]
    summary: str
    crossings: int
    grouping: str = ""


def _words(status: str) -> str:
    return status.replace("_", " ")


def draw_workflow(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> Drawing:
    """The drawing of a workflow from ``GET /api/v1/workflows/{id}``'s nodes and edges."""
    if len(nodes) <= FULL_VIEW_NODES and len(edges) <= FULL_VIEW_EDGES:
        return _full(nodes, edges)
    return _collapsed(nodes, edges)


def _full(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> Drawing:
    by_id = {n["id"]: n for n in nodes}
    pairs = [(e["parent_id"], e["child_id"]) for e in edges]
    laid = layout([n["id"] for n in nodes], pairs)
    shapes = []
    for job_id, box in laid.boxes.items():
        n = by_id[job_id]
        key = n["node_key"] or f"job {job_id}"
        status = n["status"]
        tries = f" · try {n['attempt']}/{n['max_attempts']}" if n["attempt"] else ""
        label = f"{key}: {_words(status)}, task {n['task']} in queue {n['queue']}, job {job_id}"
        shapes.append(
            NodeShape(
                box.x,
                box.y,
                box.width,
                box.height,
                status,
                _TONE.get(status, "idle"),
                (_short(key), _words(status) + tries),
                label,
                f"/jobs/{job_id}",
            )
        )
    edge_of = {(e["parent_id"], e["child_id"]): e for e in edges}
    lines = []
    for route in laid.routes:
        e = edge_of[(route.parent, route.child)]
        parent, child = by_id[route.parent], by_id[route.child]
        said = f"{parent['node_key']} → {child['node_key']}: on failure {e['on_failure']}"
        if e["resolved"]:
            said += f", parent {_words(e['resolved'])}"
        lines.append(EdgeShape(route.path, e["on_failure"], e["resolved"] or "open", said))
    summary = f"{len(nodes):,} nodes in {len(laid.order)} layers, {len(edges):,} edges"
    return Drawing(laid.width, laid.height, False, shapes, lines, summary, laid.crossings)


def _collapsed(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> Drawing:
    depth = max((n["depth"] for n in nodes), default=0) + 1
    per_band = math.ceil(depth / MAX_BANDS)

    def detailed(n: dict[str, Any]) -> tuple[Any, ...]:
        return (n["depth"] // per_band, n["queue"], n["task"], n["status"])

    def coarse(n: dict[str, Any]) -> tuple[Any, ...]:
        return (n["depth"] // per_band, "", "", n["status"])

    key_of = detailed
    if len({detailed(n) for n in nodes}) > MAX_GROUPS:
        key_of = coarse
    members: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    group_of = {}
    for n in nodes:
        key = key_of(n)
        members[key].append(n)
        group_of[n["id"]] = key
    bundles: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in edges:
        a, b = group_of.get(e["parent_id"]), group_of.get(e["child_id"])
        if a is not None and b is not None and a[0] < b[0]:
            bundles[(a, b)].append(e)
    groups = sorted(members, key=lambda k: (k[0], min(n["id"] for n in members[k])))
    laid = layout(groups, list(bundles), layers={k: k[0] for k in groups})
    shapes = []
    for key in groups:
        box = laid.boxes[key]
        band, queue, task, status = key
        group = members[key]
        first = min(n["id"] for n in group)
        what = f"task {task} in queue {queue}" if task else "nodes of every task"
        levels = f"depth {band * per_band}" + (
            f" to {band * per_band + per_band - 1}" if per_band > 1 else ""
        )
        label = f"{len(group):,} {_words(status)}: {what}, {levels}; opens job {first}, the first"
        top = _short(f"{task} · {queue}" if task else "every task")
        shapes.append(
            NodeShape(
                box.x,
                box.y,
                box.width,
                box.height,
                status,
                _TONE.get(status, "idle"),
                (top, f"\u00d7{len(group):,} {_words(status)}"),
                label,
                f"/jobs/{first}",
            )
        )
    lines = []
    for route in laid.routes:
        bundle = bundles[(route.parent, route.child)]
        policies = {e["on_failure"] for e in bundle}
        outcomes = {e["resolved"] or "open" for e in bundle}
        policy = policies.pop() if len(policies) == 1 else "mixed"
        resolved = outcomes.pop() if len(outcomes) == 1 else "mixed"
        said = f"{len(bundle):,} edges, on failure {policy}"
        lines.append(EdgeShape(route.path, policy, resolved, said))
    grouping = "band, queue, task and status" if key_of is detailed else "band and status"
    summary = (
        f"{len(nodes):,} nodes in {depth} layers, {len(edges):,} edges, "
        f"collapsed into {len(groups)} groups by {grouping}"
    )
    if per_band > 1:
        summary += f" ({per_band} layers a band)"
    return Drawing(laid.width, laid.height, True, shapes, lines, summary, laid.crossings, grouping)
