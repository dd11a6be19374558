-- Codity schema, version 9: what the operator dashboard reads, made cheap at a million jobs.
--
-- 1. Jobs by queue and state, newest first: jobs_queue_status_idx becomes
--    (queue_id, status, id), so a state tab is one index range per queue read in id order
--    and a capped count stops after the cap. Same number of indexes as before.
-- 2. Payload filters (payload @> '{"customer": 42}') use a GIN index (jsonb_path_ops: the
--    smallest GIN opclass, containment only). It costs every enqueue one GIN insertion
--    (pending list, fastupdate); docs/DESIGN_DECISIONS.md weighs that against the scan.
-- 3. Executions by finish time, per queue (partial: closed executions only): the per-minute
--    rollup reads one minute of them at a time. Dead letters by queue and time already have
--    an index (dead_letters_queue_idx).
-- 4. A dead worker's refunded executions, by worker (partial: only reap and release set
--    attempt_refunded, so claim and complete never touch this index).
-- 5. codity.queue_minutes: per queue and closed minute, the executions that completed and
--    failed in it, the jobs dead-lettered, and the depth (claimable, scheduled, running,
--    capped) sampled when the minute was rolled up. codity.roll_up (sql/functions), called
--    by tick, writes it once per minute; codity.rollup_state remembers how far it got.
--    Rows older than the retention are deleted by the same call.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0008_worker_faults

DROP INDEX codity.jobs_queue_status_idx;
CREATE INDEX jobs_queue_status_idx ON codity.jobs (queue_id, status, id);

CREATE INDEX jobs_payload_idx ON codity.jobs USING gin (payload jsonb_path_ops);

CREATE INDEX job_executions_finished_idx ON codity.job_executions (queue_id, finished_at)
    WHERE finished_at IS NOT NULL;

CREATE INDEX job_executions_refunded_idx ON codity.job_executions (worker_id, claimed_at)
    WHERE attempt_refunded;

CREATE TABLE codity.queue_minutes (
    queue_id       bigint NOT NULL REFERENCES codity.queues (id) ON DELETE CASCADE,
    minute         timestamptz NOT NULL,
    completed      integer NOT NULL DEFAULT 0,
    failed         integer NOT NULL DEFAULT 0,
    dead_lettered  integer NOT NULL DEFAULT 0,
    claimable      integer NOT NULL DEFAULT 0,
    scheduled      integer NOT NULL DEFAULT 0,
    running        integer NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, minute),
    CONSTRAINT queue_minutes_on_the_minute CHECK (minute = date_trunc('minute', minute)),
    CONSTRAINT queue_minutes_nonnegative CHECK (
        completed >= 0 AND failed >= 0 AND dead_lettered >= 0
        AND claimable >= 0 AND scheduled >= 0 AND running >= 0
    )
);

COMMENT ON TABLE codity.queue_minutes IS 'Per queue and closed minute: executions completed and failed, jobs dead-lettered, and the depth sampled at roll-up (counts capped at codity.count_cap()). Written by codity.roll_up.';

CREATE TABLE codity.rollup_state (
    id             boolean PRIMARY KEY DEFAULT true,
    rolled_until   timestamptz,
    keep           interval NOT NULL DEFAULT interval '7 days',
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT rollup_state_one_row CHECK (id),
    CONSTRAINT rollup_state_keep_range CHECK (keep BETWEEN interval '1 hour' AND interval '400 days')
);
INSERT INTO codity.rollup_state DEFAULT VALUES;

GRANT SELECT ON codity.queue_minutes TO codity_app, codity_readonly;
GRANT SELECT ON codity.rollup_state TO codity_app, codity_readonly;

ALTER TABLE codity.queue_minutes ENABLE ROW LEVEL SECURITY;
CREATE POLICY queue_minutes_project ON codity.queue_minutes TO codity_app
    USING (queue_id IN (SELECT q.id FROM codity.queues q WHERE q.project_id = codity.current_project_id()));
CREATE POLICY queue_minutes_readonly ON codity.queue_minutes FOR SELECT TO codity_readonly USING (true);
-- Retention deletes by minute across queues.
CREATE INDEX queue_minutes_minute_idx ON codity.queue_minutes (minute);
