-- Codity schema, version 27: the payload filter's GIN index leaves out empty payloads.
--
-- Why: a job without arguments has the payload '{}', and jsonb_path_ops indexes an empty
-- object under one shared "empty item" key. Every such job is one more entry in that key's
-- posting list, and while the list is small enough to sit inside its index page (about
-- 2,000 jobs), each insertion rewrites and WAL-logs the whole list: 1,784 bytes of WAL per
-- single enqueue after 200 such jobs, 600 after 10,000, 559 to 636 without the index
-- (docs/PERFORMANCE.md, "The enqueue's WAL, against PGQueuer's"). A completed job enters
-- the index again. Yet no filter needs those entries: '{}' @> f holds only for f = '{}',
-- and codity.jobs_with_payload answers the empty filter (every job) without the index.
-- Measured with one connection enqueueing one job per call into an emptied table (four
-- rounds of 3,000, twice): 186.7 and 178.3 us of server CPU per call against 195.0 and
-- 193.3 with the old index, 5 to 8 us less wall time.
--
-- Locks: building the new index holds a SHARE lock on codity.jobs (enqueues, claims and
-- completions wait) for as long as it reads the table: seconds per million jobs. The old
-- index is dropped first, so the filter runs without an index until the build ends.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0026_fewer_check_constraints

DROP INDEX codity.jobs_payload_idx;
CREATE INDEX jobs_payload_idx ON codity.jobs USING gin (payload jsonb_path_ops)
    WITH (fastupdate = off)
    WHERE status NOT IN ('claimed', 'running') AND payload <> '{}'::jsonb;
