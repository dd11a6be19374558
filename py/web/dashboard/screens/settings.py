"""The settings screen: the org and project, the org's members and roles, the project's API
keys.

Reads and acts through the API only: ``/api/v1/org``, ``/api/v1/members`` (list, add, change
a role, remove) and ``/api/v1/api-keys`` (list, create, revoke; admins only). The API's
role ladder decides (an admin cannot touch an owner, the last owner stays); when it refuses,
its message is shown on this page with its status, and nothing has changed.

A created key is shown once: in the answer to the POST that created it (a page, not a
redirect, so it is never in a URL, a cookie or a log; the pipeline marks every page
``Cache-Control: no-store``). Later views of the page list keys by prefix only.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from codity.web.access import Role
from codity.web.dashboard.page import Page, PageContext
from codity.web.errors import ApiError

__all__ = ["PAGES"]

_SHOWN_ERRORS = (403, 409, 422)
"""API refusals shown on the settings page itself; a 404 stays the one not-found page."""

_NOTICES = {
    "added": "Member added.",
    "role": "Role changed.",
    "removed": "Member removed.",
    "revoked": "API key revoked.",
}
"""What ``?notice=`` may say after an action: fixed texts, never text from the URL."""

_MEMBER = "/api/v1/members/{user_id:int}"


async def _settings(
    ctx: PageContext,
    *,
    status: int = 200,
    error: str | None = None,
    new_key: dict[str, Any] | None = None,
) -> Response:
    org = await ctx.api("GET", "/api/v1/org")
    members = await ctx.api("GET", "/api/v1/members")
    may_manage_keys = ctx.role is not None and ctx.role >= Role.ADMIN
    keys = await ctx.api("GET", "/api/v1/api-keys") if may_manage_keys else []
    return await ctx.screen(
        "settings.html",
        status=status,
        title="Settings",
        active="Settings",
        org=org,
        members=members,
        keys=keys,
        error=error,
        notice=_NOTICES.get(ctx.request.query_params.get("notice", "")),
        new_key=new_key,
        roles=[r.label for r in Role if ctx.role is not None and r <= ctx.role],
    )


async def _act(
    ctx: PageContext,
    notice: str,
    method: str,
    path: str,
    *,
    shown: tuple[int, ...] = _SHOWN_ERRORS,
    **kwargs: Any,
) -> Response:
    """Run one API action; on success back to the page with a notice, on a refusal (a status
    in ``shown``) the page with the API's message and status."""
    try:
        await ctx.api(method, path, **kwargs)
    except ApiError as exc:
        if exc.status not in shown:
            raise
        return await _settings(ctx, status=exc.status, error=exc.message)
    return ctx.redirect(f"/settings?notice={notice}")


async def settings_page(ctx: PageContext) -> Response:
    return await _settings(ctx)


async def add_member(ctx: PageContext) -> Response:
    """An unknown email is a message on this page (the form names no id, so there is no
    foreign-or-missing page to keep alike)."""
    body = {"email": ctx.form.get("email", ""), "role": ctx.form.get("role", "")}
    shown = (*_SHOWN_ERRORS, 404)
    return await _act(ctx, "added", "POST", "/api/v1/members", shown=shown, body=body)


async def change_role(ctx: PageContext) -> Response:
    params = {"user_id": ctx.path_params["user_id"]}
    body = {"role": ctx.form.get("role", "")}
    return await _act(ctx, "role", "PATCH", _MEMBER, params=params, body=body)


async def remove_member(ctx: PageContext) -> Response:
    params = {"user_id": ctx.path_params["user_id"]}
    return await _act(ctx, "removed", "DELETE", _MEMBER, params=params)


async def create_key(ctx: PageContext) -> Response:
    """The new key goes straight into this answer's page, the only time it is shown."""
    body = {"name": ctx.form.get("name", ""), "role": ctx.form.get("role", "")}
    try:
        created = await ctx.api("POST", "/api/v1/api-keys", body=body)
    except ApiError as exc:
        if exc.status not in _SHOWN_ERRORS:
            raise
        return await _settings(ctx, status=exc.status, error=exc.message)
    return await _settings(ctx, status=201, new_key=created)


async def revoke_key(ctx: PageContext) -> Response:
    params = {"key_id": ctx.path_params["key_id"]}
    return await _act(ctx, "revoked", "DELETE", "/api/v1/api-keys/{key_id:int}", params=params)


PAGES = [
    Page("GET", "/settings", settings_page, "Settings"),
    Page("POST", "/settings/members", add_member, "Add a member"),
    Page("POST", "/settings/members/{user_id:int}/role", change_role, "Change a member's role"),
    Page("POST", "/settings/members/{user_id:int}/remove", remove_member, "Remove a member"),
    Page("POST", "/settings/api-keys", create_key, "Create an API key"),
    Page("POST", "/settings/api-keys/{key_id:int}/revoke", revoke_key, "Revoke an API key"),
]
