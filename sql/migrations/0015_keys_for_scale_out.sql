-- Codity schema, version 15: the job tables' keys, foreign keys and row-level security as
-- DESIGN.md's "Room to scale out" asks (rules 4 and 8), while they are still cheap to change.
--
-- Past one primary the job tables (jobs, job_executions, dead_letters, queue_minutes) are to
-- be distributed by queue_id. A distributed table's primary and unique keys must contain the
-- distribution column, foreign keys between distributed tables must include it, a small
-- (reference) table may not point at a distributed one, and a policy that reads another
-- table turns every query into a join across nodes. So:
-- 1. Every job table carries project_id, copied from its queue when the row is written, and
--    the queue's pair (id, project_id) is what its foreign key references: the database,
--    not the functions, keeps the copy true. Row-level security for codity_app then reads
--    only the row and the tenant setting: project_id = codity.current_project_id(), where
--    each policy used to run a subquery over codity.queues for every row it checked.
--    fence_rejections carries it too (NULL for a rejection about a job that never existed,
--    as its queue_id is), so its policy reads the row alone as well.
-- 2. jobs: primary key (queue_id, id), which was already unique; the id alone keeps a plain
--    index for lookups by id (the API's /jobs/{id}). Same number of indexes as before.
-- 3. job_executions: primary key (queue_id, job_id, execution_seq), which was unique as
--    (job_id, execution_seq); its surrogate id column, which nothing read, is gone with its
--    index: one index entry less per attempt. Its foreign key to the job is
--    (queue_id, job_id) -> jobs (queue_id, id), still ON DELETE CASCADE.
-- 4. dead_letters: primary key (queue_id, id), plus a plain index on id for replay by id.
--    Its references to the job it came from and to the job a replay made (ON DELETE SET
--    NULL) are dropped: a dead letter is kept when its job is deleted (DESIGN.md), and a
--    distributed table's foreign keys may only CASCADE or do nothing. The ids stay as
--    history; readers join with LEFT JOIN and find no job when it is gone.
-- 5. scheduled_jobs.last_job_id no longer references jobs: a small table does not point at
--    a job table. The schedules' read already joins it with LEFT JOIN.
-- On a large installation this writes every row of the job tables once (the project_id
-- copy) and rebuilds the keys of jobs, job_executions and dead_letters, holding their locks
-- until it commits: run it when the queues may stand still for that long.
-- tests/test_migration_0015.py carries a 0014 database with rows in every state over.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0014_no_worker_foreign_keys

ALTER TABLE codity.queues ADD CONSTRAINT queues_id_project_key UNIQUE (id, project_id);

-- 1. project_id on every job table, referenced together with the queue.
ALTER TABLE codity.jobs ADD COLUMN project_id bigint;
UPDATE codity.jobs j SET project_id = q.project_id FROM codity.queues q WHERE q.id = j.queue_id;
ALTER TABLE codity.jobs ALTER COLUMN project_id SET NOT NULL;
ALTER TABLE codity.jobs DROP CONSTRAINT jobs_queue_id_fkey;
ALTER TABLE codity.jobs ADD CONSTRAINT jobs_queue_fkey
    FOREIGN KEY (queue_id, project_id) REFERENCES codity.queues (id, project_id) ON DELETE CASCADE;

ALTER TABLE codity.job_executions ADD COLUMN project_id bigint;
UPDATE codity.job_executions x SET project_id = q.project_id FROM codity.queues q WHERE q.id = x.queue_id;
ALTER TABLE codity.job_executions ALTER COLUMN project_id SET NOT NULL;

ALTER TABLE codity.dead_letters ADD COLUMN project_id bigint;
UPDATE codity.dead_letters d SET project_id = q.project_id FROM codity.queues q WHERE q.id = d.queue_id;
ALTER TABLE codity.dead_letters ALTER COLUMN project_id SET NOT NULL;
ALTER TABLE codity.dead_letters DROP CONSTRAINT dead_letters_queue_id_fkey;
ALTER TABLE codity.dead_letters ADD CONSTRAINT dead_letters_queue_fkey
    FOREIGN KEY (queue_id, project_id) REFERENCES codity.queues (id, project_id) ON DELETE CASCADE;

ALTER TABLE codity.queue_minutes ADD COLUMN project_id bigint;
UPDATE codity.queue_minutes m SET project_id = q.project_id FROM codity.queues q WHERE q.id = m.queue_id;
ALTER TABLE codity.queue_minutes ALTER COLUMN project_id SET NOT NULL;
ALTER TABLE codity.queue_minutes DROP CONSTRAINT queue_minutes_queue_id_fkey;
ALTER TABLE codity.queue_minutes ADD CONSTRAINT queue_minutes_queue_fkey
    FOREIGN KEY (queue_id, project_id) REFERENCES codity.queues (id, project_id) ON DELETE CASCADE;

ALTER TABLE codity.fence_rejections ADD COLUMN project_id bigint;
UPDATE codity.fence_rejections r SET project_id = q.project_id FROM codity.queues q WHERE q.id = r.queue_id;

-- 4, 5. No reference into jobs from a dead letter or a schedule.
ALTER TABLE codity.dead_letters DROP CONSTRAINT dead_letters_job_id_fkey;
ALTER TABLE codity.dead_letters DROP CONSTRAINT dead_letters_replayed_job_id_fkey;
ALTER TABLE codity.scheduled_jobs DROP CONSTRAINT scheduled_jobs_last_job_fk;

-- 2, 3. Keys that lead with queue_id.
ALTER TABLE codity.job_executions DROP CONSTRAINT job_executions_job_id_fkey;
ALTER TABLE codity.jobs DROP CONSTRAINT jobs_pkey;
ALTER TABLE codity.jobs DROP CONSTRAINT jobs_queue_id_id_key;
ALTER TABLE codity.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (queue_id, id);
CREATE INDEX jobs_id_idx ON codity.jobs (id);

ALTER TABLE codity.job_executions DROP CONSTRAINT job_executions_pkey;
ALTER TABLE codity.job_executions DROP CONSTRAINT job_executions_job_seq_key;
ALTER TABLE codity.job_executions DROP COLUMN id;
ALTER TABLE codity.job_executions ADD CONSTRAINT job_executions_pkey
    PRIMARY KEY (queue_id, job_id, execution_seq);
ALTER TABLE codity.job_executions ADD CONSTRAINT job_executions_job_fkey
    FOREIGN KEY (queue_id, job_id) REFERENCES codity.jobs (queue_id, id) ON DELETE CASCADE;

ALTER TABLE codity.dead_letters DROP CONSTRAINT dead_letters_pkey;
ALTER TABLE codity.dead_letters ADD CONSTRAINT dead_letters_pkey PRIMARY KEY (queue_id, id);
CREATE INDEX dead_letters_id_idx ON codity.dead_letters (id);

-- 1. Policies that read the row and the tenant setting only.
ALTER POLICY jobs_project ON codity.jobs
    USING (project_id = codity.current_project_id());
ALTER POLICY job_executions_project ON codity.job_executions
    USING (project_id = codity.current_project_id());
ALTER POLICY dead_letters_project ON codity.dead_letters
    USING (project_id = codity.current_project_id());
ALTER POLICY queue_minutes_project ON codity.queue_minutes
    USING (project_id = codity.current_project_id());
ALTER POLICY fence_rejections_project ON codity.fence_rejections
    USING (project_id = codity.current_project_id());

-- 7 (rule 7): codity._queue returned codity.queues, the row type of a table meant to become
-- a reference table. It now returns the columns its callers read (sql/functions/_queue.sql);
-- the return type cannot be changed in place (a fresh database has no functions yet).
DROP FUNCTION IF EXISTS codity._queue(text, bigint);

ANALYZE codity.jobs, codity.job_executions, codity.dead_letters, codity.queue_minutes;
