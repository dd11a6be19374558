-- Codity schema, version 25: what codity.prune_housekeeping finds by age, by index.
--
-- Two tables grew without bound over months: codity.workers (every worker process that
-- ever registered, stopped or dead, stays) and codity.refresh_tokens (a row per sign-in and
-- per rotation, every 15 minutes of every open dashboard). codity.prune_housekeeping
-- deletes their old rows once a minute (docs/DESIGN_DECISIONS.md 57); these indexes let it
-- find them, oldest first, without reading the tables, so that a call with nothing to do
-- costs two index probes. Neither is on a hot path: workers stop rarely, sign-ins and
-- refreshes are human-paced.
--
-- Locks: CREATE INDEX takes SHARE on each table while it builds (two small tables; a
-- worker registering or stopping, or a sign-in, waits for the build).
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0024_queue_tables_vacuum_sooner

CREATE INDEX workers_gone_idx ON codity.workers (stopped_at) WHERE status <> 'active';
CREATE INDEX refresh_tokens_expires_idx ON codity.refresh_tokens (expires_at);
