-- Codity schema, version 1: tenancy, queues, jobs, executions, dead letters, schedules, workers.
--
-- Tables are private: the API is the functions in sql/functions and the views below.
-- Invariants live here as named constraints; behaviour lives in functions, never in
-- triggers on the job tables (Citus refuses them; see docs/DESIGN_DECISIONS.md).
-- Append-only: never edit this file once merged; add a new migration instead.

CREATE SCHEMA IF NOT EXISTS codity;

-- Roles are cluster-wide, so several databases in one cluster share them.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'codity_worker') THEN
        CREATE ROLE codity_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'codity_app') THEN
        CREATE ROLE codity_app NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'codity_readonly') THEN
        CREATE ROLE codity_readonly NOLOGIN;
    END IF;
END
$roles$;

REVOKE ALL ON SCHEMA codity FROM PUBLIC;
GRANT USAGE ON SCHEMA codity TO codity_worker, codity_app, codity_readonly;

CREATE TYPE codity.job_status AS ENUM (
    'scheduled', 'queued', 'claimed', 'running', 'completed', 'failed', 'dead_letter', 'cancelled'
);
CREATE TYPE codity.execution_status AS ENUM (
    'claimed', 'running', 'completed', 'failed', 'reaped', 'released', 'cancelled'
);
CREATE TYPE codity.backoff_kind AS ENUM ('fixed', 'linear', 'exponential');
CREATE TYPE codity.worker_status AS ENUM ('active', 'stopped', 'dead');
CREATE TYPE codity.member_role AS ENUM ('owner', 'admin', 'member', 'viewer');

-- ---------------------------------------------------------------------------------------
-- Tenancy and auth
-- ---------------------------------------------------------------------------------------

CREATE TABLE codity.orgs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slug        text NOT NULL,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT orgs_slug_key UNIQUE (slug),
    CONSTRAINT orgs_slug_format CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$')
);

CREATE TABLE codity.users (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email          text NOT NULL,
    display_name   text NOT NULL DEFAULT '',
    password_hash  text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT users_email_lowercase CHECK (email = lower(email))
);
CREATE UNIQUE INDEX users_email_key ON codity.users (email);

CREATE TABLE codity.memberships (
    org_id      bigint NOT NULL REFERENCES codity.orgs (id) ON DELETE CASCADE,
    user_id     bigint NOT NULL REFERENCES codity.users (id) ON DELETE CASCADE,
    role        codity.member_role NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX memberships_user_idx ON codity.memberships (user_id);

CREATE TABLE codity.projects (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id      bigint NOT NULL REFERENCES codity.orgs (id) ON DELETE CASCADE,
    slug        text NOT NULL,
    name        text NOT NULL,
    is_default  boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT projects_org_slug_key UNIQUE (org_id, slug),
    CONSTRAINT projects_slug_format CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$')
);
-- The installation's default project: the one functions use when none is named.
CREATE UNIQUE INDEX projects_one_default ON codity.projects (is_default) WHERE is_default;

CREATE TABLE codity.api_keys (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id    bigint NOT NULL REFERENCES codity.projects (id) ON DELETE CASCADE,
    name          text NOT NULL,
    prefix        text NOT NULL,
    key_hash      bytea NOT NULL,
    role          codity.member_role NOT NULL,
    created_by    bigint REFERENCES codity.users (id) ON DELETE SET NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    revoked_at    timestamptz,
    CONSTRAINT api_keys_key_hash_key UNIQUE (key_hash),
    CONSTRAINT api_keys_role_not_owner CHECK (role <> 'owner')
);
CREATE INDEX api_keys_project_idx ON codity.api_keys (project_id);

CREATE TABLE codity.refresh_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint NOT NULL REFERENCES codity.users (id) ON DELETE CASCADE,
    family_id    uuid NOT NULL,
    token_hash   bytea NOT NULL,
    issued_at    timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    rotated_at   timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT refresh_tokens_token_hash_key UNIQUE (token_hash),
    CONSTRAINT refresh_tokens_expiry_after_issue CHECK (expires_at > issued_at)
);
CREATE INDEX refresh_tokens_family_idx ON codity.refresh_tokens (family_id);
CREATE INDEX refresh_tokens_user_idx ON codity.refresh_tokens (user_id);

-- Fixed-window counters for rate limits, shared by every web replica.
CREATE TABLE codity.rate_limit_buckets (
    bucket        text NOT NULL,
    window_start  timestamptz NOT NULL,
    hits          integer NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, window_start),
    CONSTRAINT rate_limit_buckets_hits_nonnegative CHECK (hits >= 0)
);

-- ---------------------------------------------------------------------------------------
-- Queues and their retry policy
-- ---------------------------------------------------------------------------------------

CREATE TABLE codity.queues (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id           bigint NOT NULL REFERENCES codity.projects (id) ON DELETE CASCADE,
    name                 text NOT NULL,
    max_attempts         integer NOT NULL DEFAULT 3,
    backoff              codity.backoff_kind NOT NULL DEFAULT 'exponential',
    base_delay_ms        integer NOT NULL DEFAULT 1000,
    max_delay_ms         integer NOT NULL DEFAULT 3600000,
    lease_seconds        integer NOT NULL DEFAULT 30,
    max_crashes          integer NOT NULL DEFAULT 5,
    job_timeout_seconds  integer,
    is_paused            boolean NOT NULL DEFAULT false,
    paused_at            timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queues_project_name_key UNIQUE (project_id, name),
    CONSTRAINT queues_name_format CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
    CONSTRAINT queues_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT queues_delays_valid CHECK (base_delay_ms >= 0 AND max_delay_ms >= base_delay_ms),
    CONSTRAINT queues_lease_range CHECK (lease_seconds BETWEEN 1 AND 86400),
    CONSTRAINT queues_max_crashes_range CHECK (max_crashes BETWEEN 1 AND 1000),
    CONSTRAINT queues_timeout_range CHECK (job_timeout_seconds IS NULL OR job_timeout_seconds > 0),
    CONSTRAINT queues_paused_has_time CHECK (is_paused = (paused_at IS NOT NULL))
);

-- ---------------------------------------------------------------------------------------
-- Workers
-- ---------------------------------------------------------------------------------------

CREATE TABLE codity.workers (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name               text NOT NULL,
    host               text NOT NULL DEFAULT '',
    pid                integer,
    queues             text[] NOT NULL DEFAULT '{}',
    capacity           integer NOT NULL DEFAULT 5,
    status             codity.worker_status NOT NULL DEFAULT 'active',
    started_at         timestamptz NOT NULL DEFAULT now(),
    -- Denormalised on purpose: the sweeper reads it every tick (seed, "Database").
    last_heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    stopped_at         timestamptz,
    CONSTRAINT workers_capacity_range CHECK (capacity BETWEEN 1 AND 10000),
    CONSTRAINT workers_stopped_has_time CHECK ((status = 'active') = (stopped_at IS NULL))
);
CREATE INDEX workers_active_heartbeat_idx ON codity.workers (last_heartbeat_at) WHERE status = 'active';

-- ---------------------------------------------------------------------------------------
-- Schedules (cron)
-- ---------------------------------------------------------------------------------------

CREATE TABLE codity.scheduled_jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id    bigint NOT NULL REFERENCES codity.projects (id) ON DELETE CASCADE,
    queue_id      bigint NOT NULL REFERENCES codity.queues (id) ON DELETE CASCADE,
    name          text NOT NULL,
    cron          text NOT NULL,
    time_zone     text NOT NULL DEFAULT 'UTC',
    task          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}',
    priority      smallint NOT NULL DEFAULT 0,
    is_paused     boolean NOT NULL DEFAULT false,
    next_run_at   timestamptz NOT NULL,
    last_run_at   timestamptz,
    last_job_id   bigint,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT scheduled_jobs_project_name_key UNIQUE (project_id, name),
    CONSTRAINT scheduled_jobs_payload_size CHECK (octet_length(payload::text) <= 65536),
    CONSTRAINT scheduled_jobs_priority_range CHECK (priority BETWEEN -1000 AND 1000)
);
CREATE INDEX scheduled_jobs_due_idx ON codity.scheduled_jobs (queue_id, next_run_at) WHERE NOT is_paused;

-- ---------------------------------------------------------------------------------------
-- Jobs: current state. One row per job; the audit trail is job_executions.
-- ---------------------------------------------------------------------------------------

CREATE TABLE codity.jobs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id          bigint NOT NULL REFERENCES codity.queues (id) ON DELETE CASCADE,
    task              text NOT NULL,
    payload           jsonb NOT NULL DEFAULT '{}',
    priority          smallint NOT NULL DEFAULT 0,
    status            codity.job_status NOT NULL,
    run_at            timestamptz NOT NULL,
    -- Accounting: attempts charged. A reaped or released execution gives its attempt back.
    attempt           integer NOT NULL DEFAULT 0,
    max_attempts      integer NOT NULL,
    -- Identity: the fence token. Increases on every claim, never reused.
    execution_seq     integer NOT NULL DEFAULT 0,
    -- Lease expiries charged to this job (refunded crashes); capped by queues.max_crashes.
    crash_count       integer NOT NULL DEFAULT 0,
    idempotency_key   text,
    worker_id         bigint REFERENCES codity.workers (id) ON DELETE SET NULL,
    schedule_id       bigint REFERENCES codity.scheduled_jobs (id) ON DELETE SET NULL,
    claimed_at        timestamptz,
    started_at        timestamptz,
    lock_expires_at   timestamptz,
    finished_at       timestamptz,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT jobs_queue_id_id_key UNIQUE (queue_id, id),
    CONSTRAINT jobs_queue_idempotency_key UNIQUE (queue_id, idempotency_key),
    CONSTRAINT jobs_payload_size CHECK (octet_length(payload::text) <= 65536),
    CONSTRAINT jobs_priority_range CHECK (priority BETWEEN -1000 AND 1000),
    CONSTRAINT jobs_attempt_bounds CHECK (attempt >= 0 AND attempt <= max_attempts),
    CONSTRAINT jobs_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT jobs_counters_nonnegative CHECK (execution_seq >= 0 AND crash_count >= 0),
    CONSTRAINT jobs_task_nonempty CHECK (length(task) BETWEEN 1 AND 200),
    CONSTRAINT jobs_idempotency_key_length CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    -- State <-> timestamps: a held job (claimed, running) has a lease; nothing else has one.
    CONSTRAINT jobs_lease_iff_held CHECK ((status IN ('claimed', 'running')) = (lock_expires_at IS NOT NULL)),
    CONSTRAINT jobs_held_has_claim_time CHECK (status NOT IN ('claimed', 'running') OR claimed_at IS NOT NULL),
    CONSTRAINT jobs_running_has_start CHECK (status <> 'running' OR started_at IS NOT NULL),
    CONSTRAINT jobs_finished_iff_terminal CHECK (
        (status IN ('completed', 'dead_letter', 'cancelled')) = (finished_at IS NOT NULL)
    )
);
-- The claim: columns match the claim's ORDER BY term for term, partial on queued, so the
-- plan is Limit -> LockRows -> Index Scan with no Sort node (docs/EXPLAIN.md).
CREATE INDEX jobs_claim_idx ON codity.jobs (queue_id, priority DESC, run_at, id) WHERE status = 'queued';
-- The promoter: scheduled jobs by due time, per queue.
CREATE INDEX jobs_promote_idx ON codity.jobs (queue_id, run_at) WHERE status = 'scheduled';
-- The reaper: held jobs by lease expiry, per queue.
CREATE INDEX jobs_lease_idx ON codity.jobs (queue_id, lock_expires_at) WHERE status IN ('claimed', 'running');
-- A worker's held jobs (heartbeat, sweep, deregister).
CREATE INDEX jobs_worker_idx ON codity.jobs (worker_id) WHERE status IN ('claimed', 'running');
CREATE INDEX jobs_schedule_idx ON codity.jobs (schedule_id) WHERE schedule_id IS NOT NULL;
CREATE INDEX jobs_queue_status_idx ON codity.jobs (queue_id, status);

ALTER TABLE codity.scheduled_jobs
    ADD CONSTRAINT scheduled_jobs_last_job_fk FOREIGN KEY (last_job_id)
    REFERENCES codity.jobs (id) ON DELETE SET NULL;

-- ---------------------------------------------------------------------------------------
-- Executions: one row per claim, the immutable audit trail. Identity is execution_seq
-- (monotonic, the fence token); accounting is attempt (repeatable after a refund).
-- ---------------------------------------------------------------------------------------

CREATE TABLE codity.job_executions (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id            bigint NOT NULL REFERENCES codity.jobs (id) ON DELETE CASCADE,
    queue_id          bigint NOT NULL,
    execution_seq     integer NOT NULL,
    attempt           integer NOT NULL,
    worker_id         bigint REFERENCES codity.workers (id) ON DELETE SET NULL,
    status            codity.execution_status NOT NULL DEFAULT 'claimed',
    claimed_at        timestamptz NOT NULL,
    started_at        timestamptz,
    finished_at       timestamptz,
    attempt_refunded  boolean NOT NULL DEFAULT false,
    error             text,
    result            jsonb,
    CONSTRAINT job_executions_job_seq_key UNIQUE (job_id, execution_seq),
    CONSTRAINT job_executions_seq_positive CHECK (execution_seq >= 1 AND attempt >= 1),
    CONSTRAINT job_executions_finished_iff_closed CHECK (
        (status IN ('claimed', 'running')) = (finished_at IS NULL)
    ),
    CONSTRAINT job_executions_refund_only_when_requeued CHECK (
        NOT attempt_refunded OR status IN ('reaped', 'released')
    ),
    CONSTRAINT job_executions_result_size CHECK (octet_length(result::text) <= 65536)
);
CREATE INDEX job_executions_queue_idx ON codity.job_executions (queue_id, claimed_at);

-- Calls that presented a fence token that was no longer current: recorded, never applied.
CREATE TABLE codity.fence_rejections (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id           bigint NOT NULL,
    queue_id         bigint,
    worker_id        bigint,
    call             text NOT NULL,
    presented_fence  integer NOT NULL,
    current_fence    integer,
    job_status       codity.job_status,
    rejected_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fence_rejections_job_idx ON codity.fence_rejections (job_id);

-- ---------------------------------------------------------------------------------------
-- Dead letters: payload and reason copied, so they outlive the job.
-- ---------------------------------------------------------------------------------------

CREATE TABLE codity.dead_letters (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id           bigint REFERENCES codity.jobs (id) ON DELETE SET NULL,
    queue_id         bigint NOT NULL REFERENCES codity.queues (id) ON DELETE CASCADE,
    task             text NOT NULL,
    payload          jsonb NOT NULL,
    priority         smallint NOT NULL DEFAULT 0,
    reason           text NOT NULL,
    error            text,
    attempts         integer NOT NULL,
    dead_at          timestamptz NOT NULL,
    replayed_at      timestamptz,
    replayed_job_id  bigint REFERENCES codity.jobs (id) ON DELETE SET NULL,
    CONSTRAINT dead_letters_replay_consistent CHECK (replayed_job_id IS NULL OR replayed_at IS NOT NULL)
);
CREATE INDEX dead_letters_queue_idx ON codity.dead_letters (queue_id, dead_at DESC);
CREATE INDEX dead_letters_job_idx ON codity.dead_letters (job_id) WHERE job_id IS NOT NULL;

-- ---------------------------------------------------------------------------------------
-- The lifecycle: one table of allowed transitions, the seed's state diagram.
-- Functions check every transition against it; an illegal one raises CD020.
-- ---------------------------------------------------------------------------------------

CREATE TABLE codity.job_transitions (
    from_status  codity.job_status NOT NULL,
    to_status    codity.job_status NOT NULL,
    by_what      text NOT NULL,
    PRIMARY KEY (from_status, to_status)
);

INSERT INTO codity.job_transitions (from_status, to_status, by_what) VALUES
    ('scheduled',   'queued',      'promote: run_at <= now'),
    ('queued',      'claimed',     'claim: FOR UPDATE SKIP LOCKED'),
    ('claimed',     'running',     'start: handler starts'),
    ('running',     'completed',   'complete: success'),
    ('running',     'failed',      'fail: handler error'),
    ('failed',      'scheduled',   'fail: attempt < max, backoff + jitter'),
    ('failed',      'dead_letter', 'fail: attempt >= max, or not retryable'),
    ('claimed',     'queued',      'reap or release: attempt refunded'),
    ('running',     'queued',      'reap or release: attempt refunded'),
    ('claimed',     'dead_letter', 'reap: crash cap reached'),
    ('running',     'dead_letter', 'reap: crash cap reached'),
    ('dead_letter', 'queued',      'replay_dead_letter'),
    ('scheduled',   'cancelled',   'cancel'),
    ('queued',      'cancelled',   'cancel'),
    ('claimed',     'cancelled',   'cancel'),
    ('running',     'cancelled',   'cancel');

GRANT SELECT ON codity.job_transitions TO codity_app, codity_readonly;

-- The installation's default org and project: single-team users never name one.
INSERT INTO codity.orgs (slug, name) VALUES ('default', 'Default');
INSERT INTO codity.projects (org_id, slug, name, is_default)
SELECT id, 'default', 'Default', true FROM codity.orgs WHERE slug = 'default';
