-- Codity schema, version 6: least privilege that holds for workers and for the views.
--
-- 1. A worker claims only from its own project, and only from the queues it registered
--    for (all of its project's queues when it named none): claim loses its p_project_id
--    argument — the worker row says which project — so the old signature is dropped here
--    (IF EXISTS: on a fresh database functions are created after every migration).
-- 2. The overview views ran with their owner's rights and so bypassed row-level security:
--    codity_app saw every project's queues in queue_overview. They now run with the
--    caller's rights (security_invoker, PostgreSQL 15+), so the app sees its tenant only.
--    worker_overview gains the project (it had none to filter by).
-- 3. codity_readonly, the installation-wide read role for DBAs and monitoring, reads those
--    views; with the caller's rights it needs SELECT on the operational tables they read,
--    and a policy that lets it see every project. It still reads no auth table (users,
--    refresh tokens, API keys, memberships, rate limits) and writes nothing.
-- 4. fence_rejections gains row-level security by project like the other job tables, so the
--    app may read it (the dashboard and the runbook read it).
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0005_call_outcomes

DROP FUNCTION IF EXISTS codity.claim(bigint, text, integer, bigint, timestamptz);

CREATE OR REPLACE VIEW codity.worker_overview AS
SELECT w.id AS worker_id,
       w.name,
       w.host,
       w.pid,
       w.queues,
       w.capacity,
       w.status,
       w.started_at,
       w.last_heartbeat_at,
       now() - w.last_heartbeat_at AS heartbeat_age,
       (SELECT count(*) FROM codity.jobs j WHERE j.worker_id = w.id AND j.status IN ('claimed', 'running')) AS jobs_held,
       w.project_id
FROM codity.workers w;

ALTER VIEW codity.queue_overview SET (security_invoker = true);
ALTER VIEW codity.worker_overview SET (security_invoker = true);
ALTER VIEW codity.schedule_overview SET (security_invoker = true);

GRANT SELECT ON codity.queues, codity.jobs, codity.job_executions, codity.dead_letters,
                codity.scheduled_jobs, codity.workers, codity.fence_rejections
    TO codity_readonly;
CREATE POLICY queues_readonly ON codity.queues FOR SELECT TO codity_readonly USING (true);
CREATE POLICY jobs_readonly ON codity.jobs FOR SELECT TO codity_readonly USING (true);
CREATE POLICY job_executions_readonly ON codity.job_executions FOR SELECT TO codity_readonly USING (true);
CREATE POLICY dead_letters_readonly ON codity.dead_letters FOR SELECT TO codity_readonly USING (true);
CREATE POLICY scheduled_jobs_readonly ON codity.scheduled_jobs FOR SELECT TO codity_readonly USING (true);
CREATE POLICY workers_readonly ON codity.workers FOR SELECT TO codity_readonly USING (true);

GRANT SELECT ON codity.fence_rejections TO codity_app;
ALTER TABLE codity.fence_rejections ENABLE ROW LEVEL SECURITY;
CREATE POLICY fence_rejections_project ON codity.fence_rejections TO codity_app
    USING (queue_id IN (SELECT q.id FROM codity.queues q WHERE q.project_id = codity.current_project_id()));
CREATE POLICY fence_rejections_readonly ON codity.fence_rejections FOR SELECT TO codity_readonly USING (true);
