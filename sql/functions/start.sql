-- codity.start: claimed -> running, when the handler begins.
--
-- One job of codity.start_many, so the two cannot disagree on fencing or outcomes: with a
-- fence token that is no longer the job's (reaped, reclaimed, cancelled) nothing changes,
-- the call is recorded in codity.fence_rejections and outcome 'stale' says so; repeated
-- after a lost COMMIT, it answers 'already_applied'. Locks the one job row.
-- Caller: any client, right before running the handler.

CREATE OR REPLACE FUNCTION codity.start(
    p_job_id bigint,
    p_fence integer,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (accepted boolean, outcome codity.call_outcome, job_status codity.job_status, detail text)
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
    SELECT s.accepted, s.outcome, s.job_status, s.detail
    FROM codity.start_many(ARRAY[p_job_id], ARRAY[p_fence], p_now) AS s;
$$;

COMMENT ON FUNCTION codity.start(bigint, integer, timestamptz) IS
'Mark a claimed job running (its handler has started); fenced by the claim''s token.

outcome: applied; already_applied (it was started with this fence before: a repeat after
a lost COMMIT; nothing changed); stale (accepted = false, nothing changed, the rejection is
recorded: the job was reaped, reclaimed or cancelled). Raises CD003 (unknown job), CD010
(NULL fence), CD020 (the job is not in a state that may start).
Example: SELECT * FROM codity.start(42, 1);';

REVOKE ALL ON FUNCTION codity.start(bigint, integer, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.start(bigint, integer, timestamptz) TO codity_app, codity_worker;
