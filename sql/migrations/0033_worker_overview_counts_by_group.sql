-- Codity schema, version 33: codity.worker_overview counts held jobs in one grouped read.
--
-- jobs_held was a subquery per worker, correlated from codity.workers into codity.jobs. On a
-- Citus cluster workers is a reference table, and Citus refuses a subquery correlated from a
-- reference table into a distributed one: `codity status` and every reader of the view
-- failed there (docs/DESIGN_DECISIONS.md 61). The held jobs are now counted per worker in
-- one read of the jobs held anywhere (the partial index jobs_worker_idx, as many entries as
-- jobs are claimed or running), joined to the workers. Same columns, same order, same
-- rights (security_invoker: row-level security still decides what the caller counts).
--
-- Locks: the view's definition only. Append-only: never edit this file once merged; add a
-- new migration instead.
-- depends: 0032_heartbeat_takes_queue_ids

CREATE OR REPLACE VIEW codity.worker_overview WITH (security_invoker = true) AS
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
       coalesce(h.jobs_held, 0) AS jobs_held,
       w.project_id
FROM codity.workers w
LEFT JOIN (
    SELECT j.worker_id, count(*) AS jobs_held
    FROM codity.jobs j
    WHERE j.status IN ('claimed', 'running')
    GROUP BY j.worker_id
) h ON h.worker_id = w.id;
