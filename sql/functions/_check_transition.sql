-- codity._check_transition: the lifecycle, enforced.
--
-- Every function that changes a job's status asks this first. The allowed pairs are the
-- rows of codity.job_transitions (the seed's state diagram); anything else raises CD020
-- naming both states. Read-only; the table is tiny and stays in cache.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._check_transition(
    p_from codity.job_status,
    p_to codity.job_status,
    p_job_id bigint DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM codity.job_transitions t WHERE t.from_status = p_from AND t.to_status = p_to
    ) THEN
        RAISE EXCEPTION 'illegal transition from % to %', p_from, p_to
            USING ERRCODE = 'CD020',
                  DETAIL = CASE WHEN p_job_id IS NULL THEN NULL
                                ELSE format('Job %s is %s.', p_job_id, p_from) END,
                  HINT = 'Allowed transitions are listed in codity.job_transitions.';
    END IF;
END;
$$;

COMMENT ON FUNCTION codity._check_transition(codity.job_status, codity.job_status, bigint) IS
'Private: raise CD020 unless codity.job_transitions allows the move from one status to another.';

REVOKE ALL ON FUNCTION codity._check_transition(codity.job_status, codity.job_status, bigint) FROM PUBLIC;
