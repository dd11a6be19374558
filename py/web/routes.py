"""ALL_ROUTES: every route the app serves, in one list.

Each module under ``codity.web.endpoints`` contributes its ``ROUTES``; this list is what
``create_app`` mounts, what ``/api/v1/openapi.json`` describes and what the isolation
tests walk. A route that is not in it does not exist (tests/test_web_routes.py).
"""

from __future__ import annotations

from codity.web.endpoint import Endpoint
from codity.web.endpoints import (
    api_keys,
    auth,
    dead_letters,
    docs,
    enqueue,
    health,
    jobs,
    jobs_bulk,
    members,
    metrics,
    orgs,
    overview,
    queues,
    schedules,
    workers,
    workflow_actions,
    workflows,
)
from codity.web.endpoints.docs import swagger_assets_dir

__all__ = ["ALL_ROUTES", "swagger_assets_dir"]

ALL_ROUTES: tuple[Endpoint, ...] = (
    *health.ROUTES,
    *docs.ROUTES,
    *auth.ROUTES,
    *queues.ROUTES,
    *enqueue.ROUTES,
    *jobs.ROUTES,
    *jobs_bulk.ROUTES,
    *workflows.ROUTES,
    *workflow_actions.ROUTES,
    *dead_letters.ROUTES,
    *workers.ROUTES,
    *overview.ROUTES,
    *schedules.ROUTES,
    *orgs.ROUTES,
    *members.ROUTES,
    *api_keys.ROUTES,
    *metrics.ROUTES,
)
