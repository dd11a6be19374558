"""The workflow graph's layout, without a database: layers that respect every edge (the
longest path from a root), boxes that never overlap, crossings reduced by the barycenter
sweeps on graphs built to have them, an exact crossing count, edges routed through the
layers they span, and the collapsed drawing that keeps a 10,000-node graph to a few boxes.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Hashable, Sequence
from typing import Any

import pytest

from codity.web.dashboard.render import render
from codity.web.dashboard.workflow_graph import (
    FULL_VIEW_NODES,
    MAX_BANDS,
    MAX_GROUPS,
    Layout,
    assign_layers,
    count_crossings,
    draw_workflow,
    layout,
)


def random_dag(seed: int, n: int, p: float) -> tuple[list[int], list[tuple[int, int]]]:
    """Nodes 0..n-1 in a shuffled input order; an edge i -> j (i < j) with probability p."""
    rng = random.Random(seed)
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < p]
    nodes = list(range(n))
    rng.shuffle(nodes)
    return nodes, edges


def longest_paths(nodes: list[int], edges: list[tuple[int, int]]) -> dict[int, int]:
    """The oracle: longest path to each node, by relaxing in id order (i -> j has i < j)."""
    depth = dict.fromkeys(nodes, 0)
    for a, b in sorted(edges):
        depth[b] = max(depth[b], depth[a] + 1)
    return depth


def brute_crossings(
    order: Sequence[Sequence[Hashable]], edges: Sequence[tuple[Hashable, Hashable]]
) -> int:
    where = {v: (i, p) for i, layer in enumerate(order) for p, v in enumerate(layer)}
    adjacent = [(where[a], where[b]) for a, b in edges if where[b][0] == where[a][0] + 1]
    return sum(
        1
        for (ua, ub), (va, vb) in itertools.combinations(adjacent, 2)
        if ua[0] == va[0] and (ua[1] - va[1]) * (ub[1] - vb[1]) < 0
    )


def assert_no_overlap(laid: Layout) -> None:
    boxes = list(laid.boxes.values())
    for a, b in itertools.combinations(boxes, 2):
        apart = (
            a.x + a.width <= b.x
            or b.x + b.width <= a.x
            or a.y + a.height <= b.y
            or b.y + b.height <= a.y
        )
        assert apart, (a, b)


@pytest.mark.parametrize("seed", range(8))
def test_layers_are_the_longest_path_from_a_root_and_every_edge_points_down(seed: int) -> None:
    nodes, edges = random_dag(seed, 40, 0.08)
    layers = assign_layers(nodes, edges)
    assert layers == longest_paths(nodes, edges)
    laid = layout(nodes, edges)
    for a, b in edges:
        assert laid.boxes[a].layer < laid.boxes[b].layer
        assert laid.boxes[a].y + laid.boxes[a].height < laid.boxes[b].y
    assert {n for layer in laid.order for n in layer} == set(nodes)


@pytest.mark.parametrize("seed", range(8))
def test_no_two_boxes_overlap(seed: int) -> None:
    nodes, edges = random_dag(seed, 60, 0.06)
    laid = layout(nodes, edges)
    assert_no_overlap(laid)
    assert all(b.x >= 0 and b.x + b.width <= laid.width for b in laid.boxes.values())
    assert all(b.y >= 0 and b.y + b.height <= laid.height for b in laid.boxes.values())


@pytest.mark.parametrize("seed", range(6))
def test_the_crossing_count_is_exact(seed: int) -> None:
    rng = random.Random(seed)
    top, bottom = [f"t{i}" for i in range(12)], [f"b{i}" for i in range(12)]
    edges = [(a, b) for a in top for b in bottom if rng.random() < 0.3]
    order = [rng.sample(top, len(top)), rng.sample(bottom, len(bottom))]
    assert count_crossings(order, edges) == brute_crossings(order, edges)


def test_the_sweeps_untangle_a_graph_given_in_the_worst_order() -> None:
    """Three layers, each given in the order that crosses every edge pair it can: the
    layout ends with fewer crossings than the input (here none), and says so exactly."""
    nodes = ["a", "b", "c", "d", "w", "x", "y", "z", "p", "q", "r", "s"]
    edges = [
        ("a", "z"),
        ("b", "y"),
        ("c", "x"),
        ("d", "w"),
        ("w", "s"),
        ("x", "r"),
        ("y", "q"),
        ("z", "p"),
        ("a", "y"),
    ]
    laid = layout(nodes, edges)
    given = count_crossings([nodes[:4], nodes[4:8], nodes[8:]], edges)
    assert laid.initial_crossings == given > 10
    assert (
        laid.crossings == count_crossings(laid.order, edges) == brute_crossings(laid.order, edges)
    )
    assert laid.crossings < given
    assert laid.crossings == 0
    # Break it first: without the sweeps the input order, and its crossings, stay.
    assert layout(nodes, edges, sweeps=0).crossings == given


@pytest.mark.parametrize("seed", range(10))
def test_the_sweeps_never_leave_more_crossings_than_the_input_order(seed: int) -> None:
    rng = random.Random(seed)
    layers = [[(i, k) for k in range(8)] for i in range(4)]
    edges = [
        (a, b) for i in range(3) for a in layers[i] for b in layers[i + 1] if rng.random() < 0.2
    ]
    nodes = [n for layer in layers for n in layer]
    laid = layout(nodes, edges, layers={n: n[0] for n in nodes})
    assert laid.initial_crossings == count_crossings(layers, edges)
    assert laid.crossings == count_crossings(laid.order, edges) <= laid.initial_crossings


def test_a_long_edge_is_routed_through_every_layer_it_spans() -> None:
    nodes = ["root", "a1", "a2", "a3", "end"]
    edges = [("root", "a1"), ("a1", "a2"), ("a2", "a3"), ("a3", "end"), ("root", "end")]
    laid = layout(nodes, edges)
    long = next(r for r in laid.routes if (r.parent, r.child) == ("root", "end"))
    assert len(long.points) == 2 + 2 * 3, "in and out of each of the 3 layers between"
    assert long.points[0][1] == laid.boxes["root"].y + laid.boxes["root"].height
    assert long.points[-1][1] == laid.boxes["end"].y
    ys = [y for _, y in long.points]
    assert ys == sorted(ys), "always downwards"
    for x, _ in long.points[1:-1]:
        for box in laid.boxes.values():
            assert not box.x <= x <= box.x + box.width or box.key in ("root", "end"), (
                "the placeholder points have their own room in each layer"
            )
    assert long.path.startswith("M") and "C" in long.path


def test_the_layout_is_the_same_every_time() -> None:
    nodes, edges = random_dag(3, 50, 0.07)
    first, again = layout(nodes, edges), layout(list(nodes), list(edges))
    assert first.boxes == again.boxes and first.routes == again.routes


def _api_nodes(
    count: int, *, status: str = "waiting", fail_every: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A fan-out as GET /api/v1/workflows/{id} answers it: a root and count - 1 leaves."""
    nodes = [
        {
            "id": 1,
            "node_key": "root",
            "queue": "q",
            "task": "split",
            "status": "completed",
            "attempt": 1,
            "max_attempts": 3,
            "depth": 0,
        }
    ]
    edges = []
    for i in range(2, count + 1):
        leaf_status = "dead_letter" if fail_every and i % fail_every == 0 else status
        nodes.append(
            {
                "id": i,
                "node_key": f"leaf-{i}",
                "queue": "q",
                "task": "work",
                "status": leaf_status,
                "attempt": 0,
                "max_attempts": 3,
                "depth": 1,
            }
        )
        edges.append(
            {
                "parent_id": 1,
                "child_id": i,
                "on_failure": "cancel",
                "resolved": "completed",
                "resolved_at": None,
            }
        )
    return nodes, edges


def test_a_small_graph_draws_every_node_as_a_link_with_its_status_in_words() -> None:
    nodes, edges = _api_nodes(5, status="running", fail_every=3)
    drawing = draw_workflow(nodes, edges)
    assert not drawing.collapsed and len(drawing.nodes) == 5
    assert {n.href for n in drawing.nodes} == {f"/jobs/{i}" for i in range(1, 6)}
    shape = next(n for n in drawing.nodes if n.href == "/jobs/3")
    assert (shape.status, shape.tone, shape.lines[1]) == ("dead_letter", "bad", "dead letter")
    assert "leaf-3: dead letter" in shape.label


def test_a_ten_thousand_node_fan_out_collapses_to_a_few_boxes_and_a_small_drawing() -> None:
    nodes, edges = _api_nodes(10_000, fail_every=1000)
    started = time.perf_counter()
    drawing = draw_workflow(nodes, edges)
    html = render("fragments/workflow_graph.html", {"drawing": drawing})
    took = time.perf_counter() - started
    print(f"\n10,000-node fan-out: drawn and rendered in {took * 1000:.0f} ms, {len(html):,} bytes")
    assert drawing.collapsed
    assert [(n.lines, n.status) for n in drawing.nodes] == [
        (("split · q", "\u00d71 completed"), "completed"),
        (("work · q", "\u00d79,989 waiting"), "waiting"),
        (("work · q", "\u00d710 dead letter"), "dead_letter"),
    ]
    assert [e.policy for e in drawing.edges] == ["cancel", "cancel"]
    assert len(html) < 10_000
    assert "10,000 nodes in 2 layers" in html


def test_a_deep_wide_graph_is_banded_and_grouped_to_a_bounded_number_of_boxes() -> None:
    """400 layers of 25 nodes, every node of its own task: without bands and coarser groups
    this would be 10,000 boxes."""
    nodes, edges = [], []
    for depth in range(400):
        for k in range(25):
            job = depth * 25 + k + 1
            nodes.append(
                {
                    "id": job,
                    "node_key": f"n{job}",
                    "queue": "q",
                    "task": f"t{job}",
                    "status": "queued",
                    "attempt": 0,
                    "max_attempts": 1,
                    "depth": depth,
                }
            )
            if depth:
                edges.append(
                    {
                        "parent_id": job - 25,
                        "child_id": job,
                        "on_failure": "ignore",
                        "resolved": None,
                        "resolved_at": None,
                    }
                )
    drawing = draw_workflow(nodes, edges)
    assert drawing.collapsed and drawing.grouping == "band and status"
    assert len(drawing.nodes) <= min(MAX_GROUPS, MAX_BANDS * 9)
    assert {e.policy for e in drawing.edges} == {"ignore"}
    assert "10 layers a band" in drawing.summary


def test_the_full_view_stops_at_its_node_limit() -> None:
    assert not draw_workflow(*_api_nodes(FULL_VIEW_NODES)).collapsed
    assert draw_workflow(*_api_nodes(FULL_VIEW_NODES + 1)).collapsed
