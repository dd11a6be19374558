"""What an operator does to a workflow from its page: cancel it, run its failed nodes again
(alone, or with every node after them), run all of it again, skip a node, seal a batch.

Each is a form (CSRF token, checked Origin, a confirmation for what cannot be undone) that
calls the API route of the same name for the session's user and redirects back to the
workflow, which then says what was done: only known words and numbers go through the URL.
A viewer sees no form, and the API's roles refuse one forged anyway; a refusal (a node
running where a retry would reset it, say) is the API's error, shown on the error page.
"""

from __future__ import annotations

from starlette.responses import Response

from codity.web.dashboard.page import Page, PageContext

__all__ = ["PAGES", "SKIPPABLE", "flash"]

SKIPPABLE = ("waiting", "scheduled", "queued", "dead_letter", "cancelled")
"""A node in one of these may be skipped (codity.skip_node): not running, not completed."""
_RETRY_MODES = {
    "failed": "Running {n} failed or cancelled node(s) again.",
    "failed_and_downstream": "Running {n} node(s) again: the failed ones and all after them.",
    "all": "Running all {n} node(s) again.",
}
_DONE = {
    "cancel": "Cancelled {n} unfinished job(s).",
    "skip": "Marked the node done without running it; what runs after it goes on.",
    "seal": "Sealed: no job joins the batch now; its callbacks run once its jobs finished.",
} | {f"retry-{mode}": words for mode, words in _RETRY_MODES.items()}


def flash(ctx: PageContext) -> str | None:
    """What the POST that redirected to a workflow page did."""
    query = ctx.request.query_params
    words = _DONE.get(query.get("done", ""))
    if words is None:
        return None
    n = query.get("n", "")
    return words.format(n=f"{int(n):,}" if n.isdigit() and len(n) < 10 else "the")


def _back(workflow_id: int, done: str, n: int | None = None) -> str:
    return f"/workflows/{workflow_id}?done={done}" + (f"&n={n}" if n is not None else "")


async def cancel(ctx: PageContext) -> Response:
    workflow_id = ctx.path_params["workflow_id"]
    answer = await ctx.api(
        "POST", "/api/v1/workflows/{workflow_id:int}/cancel", params={"workflow_id": workflow_id}
    )
    return ctx.redirect(_back(workflow_id, "cancel", answer["meta"]["cancelled"]))


async def retry(ctx: PageContext) -> Response:
    workflow_id = ctx.path_params["workflow_id"]
    mode = ctx.form.get("mode", "")
    answer = await ctx.api(
        "POST",
        "/api/v1/workflows/{workflow_id:int}/retry",
        params={"workflow_id": workflow_id},
        body={"mode": mode},
    )
    return ctx.redirect(_back(workflow_id, f"retry-{mode}", answer["meta"]["retried"]))


async def skip(ctx: PageContext) -> Response:
    workflow_id = ctx.path_params["workflow_id"]
    await ctx.api(
        "POST",
        "/api/v1/workflows/{workflow_id:int}/nodes/{node_key}/skip",
        params={"workflow_id": workflow_id, "node_key": ctx.path_params["node_key"]},
    )
    return ctx.redirect(_back(workflow_id, "skip"))


async def seal(ctx: PageContext) -> Response:
    workflow_id = ctx.path_params["workflow_id"]
    await ctx.api("POST", "/api/v1/batches/{batch_id:int}/seal", params={"batch_id": workflow_id})
    return ctx.redirect(_back(workflow_id, "seal"))


PAGES = [
    Page("POST", "/workflows/{workflow_id:int}/cancel", cancel, "Cancel a workflow"),
    Page("POST", "/workflows/{workflow_id:int}/retry", retry, "Run a workflow's nodes again"),
    Page(
        "POST",
        "/workflows/{workflow_id:int}/nodes/{node_key}/skip",
        skip,
        "Skip a node of a workflow",
    ),
    Page("POST", "/workflows/{workflow_id:int}/seal", seal, "Seal a batch"),
]
