-- Codity schema, version 13: an attempt's execution row is written once, when it ends; and
-- two indexes every job update paid for and no read needed.
--
-- 1. Until now the claim inserted an execution row and start, complete, fail, release, reap
--    and cancel updated it: two or three row versions, each with its index entries, for one
--    audit row per attempt. The job row already holds everything an open attempt has
--    (worker_id, claimed_at, started_at, attempt, execution_seq = the fence), so the row is
--    now inserted by whatever ends the attempt (sql/functions). Open execution rows are
--    deleted here: each is the job's current attempt, which the job row carries. From now
--    on every row is closed (job_executions_closed), and codity.execution_overview shows
--    the open attempts from the jobs table beside the closed ones, so a reader still sees
--    one row per claim.
-- 2. jobs_queue_id_desc_idx (queue_id, id DESC) duplicated jobs_queue_id_id_key
--    (queue_id, id), which a backward scan reads newest first just as well; every non-HOT
--    update of a job inserted into both.
-- 3. The idempotency key's uniqueness held an entry for every job, key or not (NULLs
--    included), updated at every transition. It is now a partial unique index over the jobs
--    that have a key; ON CONFLICT names the same predicate (enqueue_many, materialize_cron).
-- 4. job_executions_queue_idx (queue_id, claimed_at) served no read: history by queue and
--    time goes through job_executions_finished_idx (queue_id, finished_at).
-- 5. Room for a job's next versions on its own page: at fillfactor 100 every update moved
--    the row to another page, which costs a lock record on the old one and the whole new
--    row in the WAL; on the same page PostgreSQL logs only the bytes that changed. Pages
--    written from now on are filled to half (existing ones keep their rows until rewritten).
-- 6. The payload's GIN index inserts directly instead of through its pending list
--    (fastupdate off): each update of a job logged a pending-list entry and a metapage,
--    and a search no longer scans the list. Measured with scripts/wal_per_job.py:
--    with 5 and 6, 1,912 -> 1,525 bytes of WAL per job (docs/PERFORMANCE.md).
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0012_claim_starts

DELETE FROM codity.job_executions x
USING codity.jobs j
WHERE x.status IN ('claimed', 'running')
  AND j.id = x.job_id
  AND j.execution_seq = x.execution_seq
  AND j.status IN ('claimed', 'running');

ALTER TABLE codity.job_executions
    ADD CONSTRAINT job_executions_closed CHECK (finished_at IS NOT NULL);

CREATE OR REPLACE VIEW codity.execution_overview WITH (security_invoker = true) AS
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
       x.result,
       x.queue_id
FROM codity.job_executions x
JOIN codity.queues q ON q.id = x.queue_id
UNION ALL
SELECT j.id,
       q.project_id,
       q.name,
       j.execution_seq,
       j.attempt,
       CASE j.status WHEN 'running' THEN 'running'::codity.execution_status
                     ELSE 'claimed'::codity.execution_status END,
       j.worker_id,
       j.claimed_at,
       j.started_at,
       NULL::timestamptz,
       NULL::interval,
       false,
       NULL::text,
       NULL::jsonb,
       j.queue_id
FROM codity.jobs j
JOIN codity.queues q ON q.id = j.queue_id
WHERE j.status IN ('claimed', 'running');

COMMENT ON VIEW codity.execution_overview IS 'Every attempt of every job (one row per claim): worker, times, duration, outcome, refund, error and result. An attempt still held (claimed or running) comes from the job row; its execution row is written when it ends.';

DROP INDEX codity.jobs_queue_id_desc_idx;

ALTER TABLE codity.jobs DROP CONSTRAINT jobs_queue_idempotency_key;
CREATE UNIQUE INDEX jobs_queue_idempotency_key ON codity.jobs (queue_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

DROP INDEX codity.job_executions_queue_idx;

ALTER TABLE codity.jobs SET (fillfactor = 50);

ALTER INDEX codity.jobs_payload_idx SET (fastupdate = off);
