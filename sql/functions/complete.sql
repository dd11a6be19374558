-- codity.complete: running -> completed, closing the execution.
--
-- One job of codity.complete_many, so the two cannot disagree on fencing or outcomes. A
-- worker that was paused past its lease while another worker took the job presents an old
-- token: nothing changes, the call is recorded, outcome 'stale'. The same call repeated by
-- the fence's owner (its COMMIT's answer was lost) answers 'already_applied'. Locks the one
-- job row, so a concurrent cancel or reap is serialised against it: whichever commits
-- first wins and the other sees the result. Caller: any client.

CREATE OR REPLACE FUNCTION codity.complete(
    p_job_id bigint,
    p_fence integer,
    p_result jsonb DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (accepted boolean, outcome codity.call_outcome, job_status codity.job_status, detail text)
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
    SELECT c.accepted, c.outcome, c.job_status, c.detail
    FROM codity.complete_many(ARRAY[p_job_id], ARRAY[p_fence], ARRAY[p_result], p_now) AS c;
$$;

COMMENT ON FUNCTION codity.complete(bigint, integer, jsonb, timestamptz) IS
'Complete a running job, closing its execution with an optional JSON result; fenced.

outcome: applied; already_applied (it was completed with this fence before: a repeat
after a lost COMMIT; nothing changed); stale (accepted = false, nothing changed: the job
was reaped and perhaps reclaimed by another worker, or cancelled; the rejection is
recorded). Raises CD003 (unknown job), CD010 (NULL fence), CD011 (result over 64 KB),
CD020 (e.g. completing a job that never started).
Example: SELECT * FROM codity.complete(42, 1, ''{"sent": true}'');';

REVOKE ALL ON FUNCTION codity.complete(bigint, integer, jsonb, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.complete(bigint, integer, jsonb, timestamptz) TO codity_app, codity_worker;
