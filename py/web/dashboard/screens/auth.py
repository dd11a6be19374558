"""Signing in and out, and switching project: the API's own auth handlers, behind a cookie.

Sign-in calls ``POST /api/v1/auth/login`` (its sign-in rate limits included) and keeps the
refresh token it issues as the session cookie; sign-out calls ``POST /api/v1/auth/logout``
with it, which revokes its family; switching calls ``POST /api/v1/auth/switch`` for a new
session in the other project and revokes the old one.
"""

from __future__ import annotations

from starlette.responses import Response

from codity.web.dashboard.page import Page, PageContext
from codity.web.dashboard.session import (
    PRE_SESSION_COOKIE,
    clear_session,
    pre_session_token,
    remember_pre_session,
    set_session,
    signin_token,
    tokens_match,
)
from codity.web.errors import ApiError

__all__ = ["PAGES"]


def _next(target: str | None) -> str:
    """Where to go after signing in: a path of this site only (never //host or a URL)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


async def signin_form(ctx: PageContext) -> Response:
    if ctx.session is not None:
        return ctx.redirect(_next(ctx.request.query_params.get("next")))
    return _signin_page(ctx, status=200, message=None, email="")


def _signin_page(ctx: PageContext, *, status: int, message: str | None, email: str) -> Response:
    value, is_new = pre_session_token(ctx.request)
    response = ctx.render(
        "signin.html",
        status=status,
        title="Sign in",
        message=message,
        email=email,
        next=_next(ctx.request.query_params.get("next") or ctx.form.get("next")),
        signin_csrf=signin_token(ctx.settings, value),
    )
    if is_new:
        remember_pre_session(response, ctx.request, value, ctx.settings)
    return response


async def signin(ctx: PageContext) -> Response:
    pre = ctx.request.cookies.get(PRE_SESSION_COOKIE) or ""
    if not pre or not tokens_match(signin_token(ctx.settings, pre), ctx.form.get("csrf")):
        raise ApiError(403, "forbidden", "the sign-in form expired; reload the page")
    email = ctx.form.get("email", "")
    try:
        session = await ctx.api(
            "POST",
            "/api/v1/auth/login",
            body={"email": email, "password": ctx.form.get("password", "")},
        )
    except ApiError as exc:
        if exc.status in (401, 422, 429):
            message = exc.message if exc.status != 401 else "wrong email or password"
            return _signin_page(ctx, status=exc.status, message=message, email=email)
        raise
    response = ctx.redirect(_next(ctx.form.get("next")))
    set_session(response, ctx.request, session["refresh_token"], ctx.settings)
    return response


async def signout(ctx: PageContext) -> Response:
    assert ctx.session is not None
    await ctx.api("POST", "/api/v1/auth/logout", body={"refresh_token": ctx.session.token})
    response = ctx.redirect("/signin")
    clear_session(response)
    return response


async def switch(ctx: PageContext) -> Response:
    assert ctx.session is not None
    project = ctx.form.get("project_id", "")
    if not project.isdigit():
        raise ApiError(422, "invalid_input", "choose a project")
    fresh = await ctx.api("POST", "/api/v1/auth/switch", body={"project_id": int(project)})
    await ctx.api("POST", "/api/v1/auth/logout", body={"refresh_token": ctx.session.token})
    response = ctx.redirect("/")
    set_session(response, ctx.request, fresh["refresh_token"], ctx.settings)
    return response


PAGES = [
    Page("GET", "/signin", signin_form, "Sign in", signed_in=False),
    Page("POST", "/signin", signin, "Sign in", signed_in=False),
    Page("POST", "/signout", signout, "Sign out"),
    Page("POST", "/switch", switch, "Switch project"),
]
