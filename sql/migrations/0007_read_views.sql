-- Codity schema, version 7: reads for SQL clients and DBAs.
--
-- "The API is the functions and views, never the tables", yet from SQL nothing returned a
-- job's outcome, listed dead letters (replay_dead_letter needs an id nothing returned) or
-- showed fence rejections (the runbook pointed at a table granted to no role). These views
-- give codity_app and codity_readonly what the tables hold, with queue names and the
-- project, under row-level security (security_invoker: codity_app sees its tenant,
-- codity_readonly the installation). A worker, which reads no table, gets its jobs'
-- outcomes through codity.get_job and codity.get_job_executions (sql/functions).
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0006_worker_scope

CREATE VIEW codity.job_overview WITH (security_invoker = true) AS
SELECT j.id AS job_id,
       q.project_id,
       q.name AS queue,
       j.task,
       j.status,
       j.priority,
       j.attempt,
       j.max_attempts,
       j.crash_count,
       j.execution_seq AS fence,
       j.run_at,
       j.created_at,
       j.claimed_at,
       j.started_at,
       j.finished_at,
       j.lock_expires_at AS lease_expires_at,
       j.worker_id,
       j.schedule_id,
       j.idempotency_key,
       j.last_error,
       (SELECT x.result FROM codity.job_executions x
        WHERE x.job_id = j.id AND x.execution_seq = j.execution_seq) AS result,
       j.payload
FROM codity.jobs j
JOIN codity.queues q ON q.id = j.queue_id;

COMMENT ON VIEW codity.job_overview IS 'Every job with its queue and project: state, attempts, lease, last error, the result of its latest execution, payload.';

CREATE VIEW codity.execution_overview WITH (security_invoker = true) AS
SELECT x.job_id,
       q.project_id,
       q.name AS queue,
       x.execution_seq AS fence,
       x.attempt,
       x.status,
       x.worker_id,
       x.claimed_at,
       x.started_at,
       x.finished_at,
       x.finished_at - coalesce(x.started_at, x.claimed_at) AS duration,
       x.attempt_refunded,
       x.error,
       x.result
FROM codity.job_executions x
JOIN codity.queues q ON q.id = x.queue_id;

COMMENT ON VIEW codity.execution_overview IS 'Every attempt of every job (one row per claim): worker, times, duration, outcome, refund, error and result.';

CREATE VIEW codity.dead_letter_overview WITH (security_invoker = true) AS
SELECT d.id AS dead_letter_id,
       q.project_id,
       q.name AS queue,
       d.job_id,
       d.task,
       d.reason,
       d.error,
       d.attempts,
       d.dead_at,
       d.replayed_at,
       d.replayed_job_id,
       d.priority,
       d.payload
FROM codity.dead_letters d
JOIN codity.queues q ON q.id = d.queue_id;

COMMENT ON VIEW codity.dead_letter_overview IS 'Dead letters with their queue and project, reason and error; replay one with codity.replay_dead_letter(dead_letter_id).';

CREATE VIEW codity.fence_rejection_overview WITH (security_invoker = true) AS
SELECT f.id AS rejection_id,
       q.project_id,
       q.name AS queue,
       f.job_id,
       f.worker_id,
       f.call,
       f.presented_fence,
       f.current_fence,
       f.job_status,
       f.rejected_at
FROM codity.fence_rejections f
JOIN codity.queues q ON q.id = f.queue_id;

COMMENT ON VIEW codity.fence_rejection_overview IS 'Calls refused for a stale fence token (a worker that froze past its lease, or finished a cancelled job).';

GRANT SELECT ON codity.job_overview, codity.execution_overview, codity.dead_letter_overview,
                codity.fence_rejection_overview
    TO codity_app, codity_readonly;
