-- Codity schema, version 3: what the HTTP API needs — workers belong to a project, the web
-- role's table grants, and row-level security keyed on the project as the database's own
-- wall between tenants.
--
-- The web app runs every transaction as codity_app (SET LOCAL ROLE) with the project it
-- guarded in the setting codity.project_id (set_config(..., true): transaction-local).
-- codity_app is not the tables' owner and has no BYPASSRLS, so even a query that forgot its
-- WHERE project_id = ... sees only that project's rows. SECURITY DEFINER functions run as
-- their owner and are unaffected: they take the project as an argument and filter by it.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0002_views

-- Workers serve queues of one project; register_worker records which.
ALTER TABLE codity.workers ADD COLUMN project_id bigint REFERENCES codity.projects (id) ON DELETE CASCADE;
UPDATE codity.workers SET project_id = (SELECT p.id FROM codity.projects p WHERE p.is_default);
ALTER TABLE codity.workers ALTER COLUMN project_id SET NOT NULL;
CREATE INDEX workers_project_idx ON codity.workers (project_id, started_at DESC);

-- A refresh token continues one session, and a session acts in one org and project: the
-- token remembers them, so refreshing never takes the tenant from the client.
ALTER TABLE codity.refresh_tokens
    ADD COLUMN org_id bigint REFERENCES codity.orgs (id) ON DELETE CASCADE,
    ADD COLUMN project_id bigint REFERENCES codity.projects (id) ON DELETE CASCADE;

-- Keyset pagination of a project's jobs, newest first, optionally by state.
CREATE INDEX jobs_queue_id_desc_idx ON codity.jobs (queue_id, id DESC);

-- The project (and org) the current transaction acts for; NULL when none was set, so every
-- policy below then matches nothing. An empty string is what a transaction-local setting
-- reverts to after the transaction that set it, hence NULLIF.
CREATE FUNCTION codity.current_project_id()
RETURNS bigint
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, codity
AS $$ SELECT NULLIF(pg_catalog.current_setting('codity.project_id', true), '')::bigint $$;

COMMENT ON FUNCTION codity.current_project_id() IS
'The project the current transaction acts for (setting codity.project_id), or NULL; row-level security keys on it.

Example: SELECT set_config(''codity.project_id'', ''1'', true), codity.current_project_id();';

CREATE FUNCTION codity.current_org_id()
RETURNS bigint
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, codity
AS $$ SELECT NULLIF(pg_catalog.current_setting('codity.org_id', true), '')::bigint $$;

COMMENT ON FUNCTION codity.current_org_id() IS
'The org the current transaction acts for (setting codity.org_id), or NULL; row-level security keys on it.

Example: SELECT set_config(''codity.org_id'', ''1'', true), codity.current_org_id();';

REVOKE ALL ON FUNCTION codity.current_project_id(), codity.current_org_id() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.current_project_id(), codity.current_org_id() TO codity_app;

-- ---------------------------------------------------------------------------------------
-- Grants: what the web role may touch directly. Job state changes still go through the
-- functions; the app reads tables (under RLS) and writes only tenancy and auth rows.
-- ---------------------------------------------------------------------------------------

GRANT SELECT ON codity.queues, codity.jobs, codity.job_executions, codity.dead_letters,
                codity.scheduled_jobs, codity.workers
    TO codity_app;
GRANT SELECT, INSERT, UPDATE ON codity.api_keys TO codity_app;
GRANT SELECT, INSERT, UPDATE ON codity.orgs, codity.users, codity.refresh_tokens TO codity_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON codity.memberships, codity.projects TO codity_app;

-- ---------------------------------------------------------------------------------------
-- Row-level security: project-keyed data.
-- ---------------------------------------------------------------------------------------

ALTER TABLE codity.queues ENABLE ROW LEVEL SECURITY;
CREATE POLICY queues_project ON codity.queues TO codity_app
    USING (project_id = codity.current_project_id());

ALTER TABLE codity.scheduled_jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY scheduled_jobs_project ON codity.scheduled_jobs TO codity_app
    USING (project_id = codity.current_project_id());

ALTER TABLE codity.workers ENABLE ROW LEVEL SECURITY;
CREATE POLICY workers_project ON codity.workers TO codity_app
    USING (project_id = codity.current_project_id());

ALTER TABLE codity.api_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY api_keys_project ON codity.api_keys TO codity_app
    USING (project_id = codity.current_project_id())
    WITH CHECK (project_id = codity.current_project_id());

-- Jobs, executions and dead letters carry the queue, not the project (their keys stay
-- shardable by queue); the policy goes through the queue.
ALTER TABLE codity.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY jobs_project ON codity.jobs TO codity_app
    USING (queue_id IN (SELECT q.id FROM codity.queues q WHERE q.project_id = codity.current_project_id()));

ALTER TABLE codity.job_executions ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_executions_project ON codity.job_executions TO codity_app
    USING (queue_id IN (SELECT q.id FROM codity.queues q WHERE q.project_id = codity.current_project_id()));

ALTER TABLE codity.dead_letters ENABLE ROW LEVEL SECURITY;
CREATE POLICY dead_letters_project ON codity.dead_letters TO codity_app
    USING (queue_id IN (SELECT q.id FROM codity.queues q WHERE q.project_id = codity.current_project_id()));

-- ---------------------------------------------------------------------------------------
-- Row-level security: org-keyed data. A project row is visible within its org; a
-- membership within its org, or to its own user (login lists a user's orgs before one is
-- chosen: codity.user_id).
-- ---------------------------------------------------------------------------------------

ALTER TABLE codity.projects ENABLE ROW LEVEL SECURITY;
CREATE POLICY projects_org ON codity.projects TO codity_app
    USING (org_id = codity.current_org_id())
    WITH CHECK (org_id = codity.current_org_id());

ALTER TABLE codity.memberships ENABLE ROW LEVEL SECURITY;
CREATE POLICY memberships_org ON codity.memberships TO codity_app
    USING (org_id = codity.current_org_id()
           OR user_id = NULLIF(pg_catalog.current_setting('codity.user_id', true), '')::bigint)
    WITH CHECK (org_id = codity.current_org_id());
