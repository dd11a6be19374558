-- codity._check_single_server: refuse what does not run on a Citus cluster yet.
--
-- Workflows and batches change jobs of several queues (so several shards) in one
-- transaction and wake queues from inside the function body (docs/DATABASE.md, the
-- scale-out rules 2 and 10); until they are built for it, a cluster whose codity.jobs is
-- distributed refuses them with 0A000 (feature_not_supported) before anything is written.
-- Read-only. SECURITY INVOKER without SET: called only from definer functions; granted to
-- nobody.

CREATE OR REPLACE FUNCTION codity._check_single_server(p_what text)
RETURNS void
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
DECLARE
    v_distributed boolean := false;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition'
            ' WHERE logicalrelid = ''codity.jobs''::pg_catalog.regclass)'
    INTO v_distributed;
    IF v_distributed THEN
        RAISE EXCEPTION '% do not run on a Citus cluster yet', p_what
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'Enqueue the jobs one after another from their handlers, or run them on a single server.';
    END IF;
END;
$$;

COMMENT ON FUNCTION codity._check_single_server(text) IS
'Private: raise 0A000 on a Citus cluster whose jobs are distributed (workflows and batches run on one server for now).';

REVOKE ALL ON FUNCTION codity._check_single_server(text) FROM PUBLIC;
