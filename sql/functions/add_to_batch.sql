-- codity.add_to_batch: more jobs join an open batch.
--
-- The jobs are checked and inserted as create_batch's are (codity._add_batch_members):
-- members released at once, each with an edge to every callback. A sealed batch takes no
-- more (CD020): its callbacks may have run. Locks the batch's workflow row first (so adds
-- and the seal take turns), then its callbacks. Callers: any client (SQL), the web API.

CREATE OR REPLACE FUNCTION codity.add_to_batch(
    p_batch_id bigint,
    p_jobs jsonb,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint, queue_id bigint, job_status codity.job_status)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_sealed_at timestamptz;
BEGIN
    PERFORM codity._check_clock(p_now);
    PERFORM codity._workflow(p_batch_id, v_project_id, 'batch');
    SELECT w.sealed_at INTO v_sealed_at FROM codity.workflows w WHERE w.id = p_batch_id FOR UPDATE;
    IF v_sealed_at IS NOT NULL THEN
        RAISE EXCEPTION 'batch % was sealed at %; it takes no more jobs', p_batch_id, v_sealed_at
            USING ERRCODE = 'CD020', HINT = 'Create another batch, or create it open ("open": true) next time.';
    END IF;
    RETURN QUERY SELECT * FROM codity._add_batch_members(p_batch_id, v_project_id, p_jobs, p_now);
END;
$$;

COMMENT ON FUNCTION codity.add_to_batch(bigint, jsonb, bigint, timestamptz) IS
'Add jobs to an open batch: [{"queue", "task", "payload", "run_at", "priority", "max_attempts"}], at most 10,000 a call.

Returns one row per job, in the order given. Raises CD001 (unknown queue), CD008 (no such
batch in the project), CD010 (bad shape, over 100,000 members), CD011 (a payload over
64 KB), CD020 (the batch is sealed); writes nothing then.
Example: SELECT * FROM codity.add_to_batch(7, ''[{"queue": "img", "task": "thumb", "payload": {"n": 2}}]'');';

REVOKE ALL ON FUNCTION codity.add_to_batch(bigint, jsonb, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.add_to_batch(bigint, jsonb, bigint, timestamptz) TO codity_app, codity_worker;
