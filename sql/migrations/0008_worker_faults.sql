-- Codity schema, version 8: what the worker fault battery asked of the database.
--
-- 1. A job that crashed its worker is claimed alone. claim gains p_suspects and returns
--    crashes (the job's crash count): a job with a crash on record comes alone in its batch,
--    and not at all to a worker that says it holds other jobs, so a poison pill cannot take
--    healthy co-claimed jobs down to the crash cap with it.
-- 2. The dead-worker threshold is a setting of the installation (codity.settings, changed
--    with codity.configure), no longer a constant in tick's default, and every worker
--    declares its heartbeat interval at registration: the threshold must allow at least
--    two of them, checked both ways (register_worker and configure).
-- Result types and signatures change, so the old ones are dropped (IF EXISTS: on a fresh
-- database functions are created after every migration).
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0007_read_views

DROP FUNCTION IF EXISTS codity.claim(bigint, text, integer, timestamptz);
DROP FUNCTION IF EXISTS codity.register_worker(text, text[], integer, text, integer, bigint, timestamptz);

CREATE TABLE codity.settings (
    id                 boolean PRIMARY KEY DEFAULT true,
    worker_dead_after  interval NOT NULL DEFAULT interval '15 seconds',
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT settings_one_row CHECK (id),
    CONSTRAINT settings_worker_dead_after_range
        CHECK (worker_dead_after BETWEEN interval '2 seconds' AND interval '1 hour')
);
INSERT INTO codity.settings DEFAULT VALUES;
GRANT SELECT ON codity.settings TO codity_app, codity_readonly;

-- What each worker promised: it heartbeats at least this often (seconds).
ALTER TABLE codity.workers ADD COLUMN heartbeat_seconds numeric NOT NULL DEFAULT 5;
ALTER TABLE codity.workers ADD CONSTRAINT workers_heartbeat_range
    CHECK (heartbeat_seconds > 0 AND heartbeat_seconds <= 1800);
