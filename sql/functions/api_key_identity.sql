-- codity.api_key_identity: who an API key is, looked up by the hash of the presented key.
--
-- The web app authenticates a key before it knows the project, and api_keys is behind
-- row-level security keyed on the project; this definer function is the one narrow way
-- through: by exact hash only, live keys only, returning the key's project, org and role
-- (never the hash). It stamps last_used_at at most once a minute, so a busy key does not
-- turn every request into a row update. Locks the key's row only when it stamps it.
-- Caller: the web app's authentication, once per request that presents a key.

CREATE OR REPLACE FUNCTION codity.api_key_identity(p_key_hash bytea, p_now timestamptz DEFAULT now())
RETURNS TABLE (api_key_id bigint, project_id bigint, org_id bigint, role codity.member_role)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_key_hash IS NULL OR octet_length(p_key_hash) <> 32 THEN
        RETURN;
    END IF;
    UPDATE codity.api_keys k SET last_used_at = p_now
    WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
      AND (k.last_used_at IS NULL OR k.last_used_at < p_now - interval '1 minute');
    RETURN QUERY
    SELECT k.id, k.project_id, p.org_id, k.role
    FROM codity.api_keys k
    JOIN codity.projects p ON p.id = k.project_id
    WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL;
END;
$$;

COMMENT ON FUNCTION codity.api_key_identity(bytea, timestamptz) IS
'The project, org and role of the live API key whose SHA-256 is p_key_hash; no row when none.

Revoked keys return nothing, so revocation takes effect on the next request.
Example: SELECT * FROM codity.api_key_identity(sha256(''cdy_...''::bytea));';

REVOKE ALL ON FUNCTION codity.api_key_identity(bytea, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.api_key_identity(bytea, timestamptz) TO codity_app;
