-- codity._reopen_held: a dead-lettered or cancelled workflow node runs again, so the
-- children it holds (edges 'hold') wait for it again.
--
-- A 'hold' edge from a failed parent never counted down its child, which still waits with
-- that parent in its count; setting the edge's outcome back to NULL lets the parent's next
-- settlement (codity._settle_children) count it. Edges of the other policies already did
-- what they do (cancelled, counted or released the child) and stay as they are: bringing
-- those children back is codity.retry_workflow's work. Called by replay_dead_letter.
-- Locks the parents' edges (their queue's shard). SECURITY INVOKER without SET: called only
-- from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._reopen_held(p_queue_id bigint, p_parent_ids bigint[])
RETURNS void
LANGUAGE sql
VOLATILE
SECURITY INVOKER
AS $$
    UPDATE codity.job_deps d SET resolved = NULL, resolved_at = NULL
    WHERE d.queue_id = p_queue_id AND d.parent_id = ANY (p_parent_ids)
      AND d.on_failure = 'hold' AND d.resolved IN ('dead_letter', 'cancelled');
$$;

COMMENT ON FUNCTION codity._reopen_held(bigint, bigint[]) IS
'Private: reopen the ''hold'' edges of failed workflow nodes that run again, so their children wait for them again.';

REVOKE ALL ON FUNCTION codity._reopen_held(bigint, bigint[]) FROM PUBLIC;
