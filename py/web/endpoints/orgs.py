"""The current org and its projects. Viewers read; admins create and rename projects; owners
rename the org and delete projects.

The org is always the one the guard established from the credential (``call.org_id``):
no route takes an org id. Projects are under row-level security keyed on the org, and every
query here also filters by it explicitly, so a project of another org answers exactly like a
missing one. API keys cannot use these routes: a key serves one project's workers and
services, and the org's structure is none of their business.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint
from codity.web.errors import ApiError
from codity.web.fields import PrintableName, Strict
from codity.web.lookups import one_or_404, path_id

__all__ = ["ROUTES"]

Name = Annotated[PrintableName, StringConstraints(max_length=200)]
Slug = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]


class OrgUpdate(Strict):
    name: Name


class ProjectCreate(Strict):
    slug: Slug
    name: Name


class ProjectUpdate(Strict):
    name: Name


class Org(BaseModel):
    id: int
    slug: str
    name: str
    created_at: dt.datetime


class Project(BaseModel):
    id: int
    slug: str
    name: str
    is_default: bool
    created_at: dt.datetime


# --- the org --------------------------------------------------------------------------------

_ORG = "SELECT id, slug, name, created_at FROM codity.orgs WHERE id = %s"


async def get_org(call: Call[None, None]) -> dict[str, Any]:
    return await one_or_404(call, _ORG, [call.org_id], "org")


async def update_org(call: Call[OrgUpdate, None]) -> dict[str, Any]:
    return await one_or_404(
        call,
        "UPDATE codity.orgs SET name = %s WHERE id = %s RETURNING id, slug, name, created_at",
        [call.body.name, call.org_id],
        "org",
    )


# --- projects -------------------------------------------------------------------------------

_PROJECT = "SELECT id, slug, name, is_default, created_at FROM codity.projects"


async def _one_project(call: Call[Any, Any], project_id: int) -> dict[str, Any]:
    query = _PROJECT + " WHERE org_id = %s AND id = %s"
    return await one_or_404(call, query, [call.org_id, project_id], "project")


async def list_projects(call: Call[None, None]) -> list[dict[str, Any]]:
    cur = await call.conn.execute(_PROJECT + " WHERE org_id = %s ORDER BY slug", [call.org_id])
    return [dict(r) for r in await cur.fetchall()]


async def get_project(call: Call[None, None]) -> dict[str, Any]:
    return await _one_project(call, path_id(call, "project_id", "project"))


async def create_project(call: Call[ProjectCreate, None]) -> dict[str, Any]:
    org_id = call.org_id
    cur = await call.conn.execute(
        "SELECT 1 FROM codity.projects WHERE org_id = %s AND slug = %s", [org_id, call.body.slug]
    )
    if await cur.fetchone() is not None:
        raise ApiError(409, "conflict", f"project {call.body.slug!r} already exists")
    # ON CONFLICT covers two creators racing past the check above: the loser gets 409 too.
    cur = await call.conn.execute(
        "INSERT INTO codity.projects (org_id, slug, name) VALUES (%s, %s, %s)"
        " ON CONFLICT (org_id, slug) DO NOTHING"
        " RETURNING id, slug, name, is_default, created_at",
        [org_id, call.body.slug, call.body.name],
    )
    row = await cur.fetchone()
    if row is None:
        raise ApiError(409, "conflict", f"project {call.body.slug!r} already exists")
    return dict(row)


async def update_project(call: Call[ProjectUpdate, None]) -> dict[str, Any]:
    return await one_or_404(
        call,
        "UPDATE codity.projects SET name = %s WHERE org_id = %s AND id = %s"
        " RETURNING id, slug, name, is_default, created_at",
        [call.body.name, call.org_id, path_id(call, "project_id", "project")],
        "project",
    )


async def delete_project(call: Call[None, None]) -> None:
    """Deletes the project and its queues, jobs, executions, schedules, workers and keys.

    Refused for the project this credential acts in (the caller would saw off the branch
    it sits on) and for the installation's default project (functions fall back to it)."""
    project = await _one_project(call, path_id(call, "project_id", "project"))
    if project["id"] == call.project_id:
        raise ApiError(
            409,
            "conflict",
            "this is the project you are acting in; switch to another project to delete it",
        )
    if project["is_default"]:
        raise ApiError(409, "conflict", "the installation's default project cannot be deleted")
    # Through the function: execution rows carry no foreign key (migration 0019), so the
    # project's cascade does not reach them, and this role may not delete them itself.
    await call.conn.execute("SELECT codity.delete_project(%s)", [project["id"]])


_ONE = "/api/v1/projects/{project_id:int}"

ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/org",
        Scope.PROJECT,
        get_org,
        "The current org",
        "orgs",
        min_role=Role.VIEWER,
        response=Org,
        api_keys=False,
    ),
    Endpoint(
        "PATCH",
        "/api/v1/org",
        Scope.PROJECT,
        update_org,
        "Rename the current org (the slug never changes)",
        "orgs",
        min_role=Role.OWNER,
        body=OrgUpdate,
        response=Org,
        api_keys=False,
        example={"name": "Acme Inc."},
    ),
    Endpoint(
        "GET",
        "/api/v1/projects",
        Scope.PROJECT,
        list_projects,
        "List the current org's projects",
        "projects",
        min_role=Role.VIEWER,
        response=Project,
        many=True,
        api_keys=False,
    ),
    Endpoint(
        "POST",
        "/api/v1/projects",
        Scope.PROJECT,
        create_project,
        "Create a project in the current org",
        "projects",
        min_role=Role.ADMIN,
        body=ProjectCreate,
        response=Project,
        status=201,
        api_keys=False,
        errors=(409,),
        example={"slug": "billing", "name": "Billing"},
    ),
    Endpoint(
        "GET",
        _ONE,
        Scope.PROJECT,
        get_project,
        "Get a project of the current org",
        "projects",
        min_role=Role.VIEWER,
        response=Project,
        api_keys=False,
        errors=(404,),
    ),
    Endpoint(
        "PATCH",
        _ONE,
        Scope.PROJECT,
        update_project,
        "Rename a project (the slug never changes)",
        "projects",
        min_role=Role.ADMIN,
        body=ProjectUpdate,
        response=Project,
        api_keys=False,
        errors=(404,),
        example={"name": "Billing (EU)"},
    ),
    Endpoint(
        "DELETE",
        _ONE,
        Scope.PROJECT,
        delete_project,
        "Delete a project and everything in it",
        "projects",
        min_role=Role.OWNER,
        status=204,
        api_keys=False,
        errors=(404, 409),
    ),
]
