-- codity.seal_batch: an open batch is complete; its callbacks may run.
--
-- Sets sealed_at and counts the seal down on the callbacks (codity._seal_batch): with
-- every member settled already, all_done and all_succeeded run now. Sealing a sealed batch
-- changes nothing and answers the same, so a repeated request is harmless. Locks the
-- batch's workflow row, then its callbacks. Callers: any client (SQL), the web API.

CREATE OR REPLACE FUNCTION codity.seal_batch(
    p_batch_id bigint,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (callback text, job_id bigint, job_status codity.job_status, sealed_at timestamptz)
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
    IF v_sealed_at IS NULL THEN
        v_sealed_at := p_now;
        UPDATE codity.workflows w SET sealed_at = p_now WHERE w.id = p_batch_id;
        PERFORM codity._seal_batch(p_batch_id, p_now);
    END IF;
    RETURN QUERY
    SELECT j.node_key, j.id, j.status, v_sealed_at
    FROM codity.jobs j WHERE j.workflow_id = p_batch_id AND j.node_key IS NOT NULL
    ORDER BY j.node_key;
END;
$$;

COMMENT ON FUNCTION codity.seal_batch(bigint, bigint, timestamptz) IS
'Seal an open batch: it takes no more jobs, and its callbacks run once its members are done.

Returns each callback with its status, and when the batch was sealed (a sealed batch answers
the same again). Raises CD008 (no such batch in the project).
Example: SELECT * FROM codity.seal_batch(7);';

REVOKE ALL ON FUNCTION codity.seal_batch(bigint, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.seal_batch(bigint, bigint, timestamptz) TO codity_app, codity_worker;
