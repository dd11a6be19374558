-- codity.enqueue_workflow: a whole graph of jobs in one call, all or nothing (issue 27).
--
-- Every node is a job, inserted now: a node with no parent queued (or scheduled), the
-- others 'waiting' with the count of their parents, so ids come back at once and cancel,
-- the dashboards and retention see every node from the start. Edges go to job_deps. The
-- checks come first and write nothing: the spec's shape, each node as enqueue_many checks
-- a job, every queue in the project (CD001), keys unique, every "after" naming another node,
-- limits (10,000 nodes, 10,000 parents a node, 50,000 edges), no cycle (Kahn's algorithm,
-- which also gives each node its depth, the order its row is locked in when its parents
-- settle: codity._settle_children). A workflow idempotency key seen before returns that
-- workflow's nodes with is_new = false. Wakes the queues of the nodes queued now.
-- Caller: any client (SQL). On a Citus cluster it runs on the coordinator, which writes the
-- nodes' shards in one distributed transaction; the nodes' settlements are then folded by
-- codity.tick (docs/DESIGN_DECISIONS.md 73).

CREATE OR REPLACE FUNCTION codity.enqueue_workflow(
    p_spec jsonb,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    workflow_id bigint,
    node_key text,
    job_id bigint,
    queue_id bigint,
    job_status codity.job_status,
    is_new boolean
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    c_node_keys CONSTANT text[] := ARRAY['key', 'queue', 'after', 'task', 'payload', 'run_at',
                                         'priority', 'max_attempts'];
    v_project_id bigint := codity._project_id(p_project_id);
    v_nodes jsonb := p_spec -> 'nodes';
    v_n integer;
    v_workflow_id bigint;
    v_kind text;
    v_node jsonb;
    v_problem text;
    v_keys text[] := '{}';
    v_ord_of jsonb := '{}';
    v_queue_names text[] := '{}';
    v_queue_ids bigint[] := '{}';
    v_queue record;
    v_queue_by_name jsonb := '{}';
    v_default_attempts jsonb := '{}';
    v_after jsonb;
    v_edge jsonb;
    v_parent text;
    v_policy text;
    v_default_policy text := coalesce(p_spec ->> 'on_failure', 'cancel');
    v_runs integer;
    v_parent_ord integer;
    -- Edges by position: parent, child, policy.
    v_from integer[] := '{}';
    v_to integer[] := '{}';
    v_policies text[] := '{}';
    v_indegree integer[];
    v_parents integer[];
    v_depth integer[];
    v_first integer[];
    v_by_parent integer[];
    v_stack integer[];
    v_done integer := 0;
    v_at integer;
    v_child integer;
    v_ids bigint[];
    v_cycle text[];
    i integer;
    k integer;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF pg_catalog.jsonb_typeof(p_spec) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'a workflow must be a JSON object with "nodes"'
            USING ERRCODE = 'CD010',
                  HINT = 'Example: {"nodes": [{"key": "a", "queue": "q", "task": "t"}, {"key": "b", "queue": "q", "task": "t", "after": ["a"]}]}';
    END IF;
    IF p_spec - ARRAY['name', 'idempotency_key', 'on_failure', 'nodes'] <> '{}'::jsonb THEN
        RAISE EXCEPTION 'unknown key "%" in the workflow (allowed: name, idempotency_key, on_failure, nodes)',
            (SELECT k.key FROM jsonb_object_keys(p_spec - ARRAY['name', 'idempotency_key', 'on_failure', 'nodes']) AS k(key) LIMIT 1)
            USING ERRCODE = 'CD010';
    END IF;
    IF p_spec ? 'on_failure' AND NOT coalesce((p_spec ->> 'on_failure') = ANY (ARRAY['cancel', 'ignore', 'hold']), false) THEN
        RAISE EXCEPTION 'a workflow''s on_failure is "cancel", "ignore" or "hold", got %', p_spec -> 'on_failure'
            USING ERRCODE = 'CD010', HINT = 'It is the default of every edge; an edge can say otherwise.';
    END IF;
    IF pg_catalog.jsonb_typeof(v_nodes) IS DISTINCT FROM 'array' OR jsonb_array_length(v_nodes) = 0 THEN
        RAISE EXCEPTION 'a workflow''s "nodes" must be a non-empty JSON array of job objects'
            USING ERRCODE = 'CD010';
    END IF;
    v_n := jsonb_array_length(v_nodes);
    IF v_n > 10000 THEN
        RAISE EXCEPTION 'a workflow holds at most 10000 nodes, got %', v_n
            USING ERRCODE = 'CD010', HINT = 'Split it, or run a batch of plain jobs.';
    END IF;
    IF coalesce(pg_catalog.jsonb_typeof(p_spec -> 'name'), 'string') <> 'string'
       OR pg_catalog.length(p_spec ->> 'name') NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a workflow''s name must be a string of 1 to 200 characters' USING ERRCODE = 'CD010';
    END IF;
    IF coalesce(pg_catalog.jsonb_typeof(p_spec -> 'idempotency_key'), 'string') <> 'string'
       OR pg_catalog.length(p_spec ->> 'idempotency_key') NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a workflow''s idempotency_key must be a string of 1 to 200 characters'
            USING ERRCODE = 'CD010';
    END IF;

    -- A workflow enqueued before under this key: its nodes, as they are now.
    IF p_spec ? 'idempotency_key' THEN
        SELECT w.id, w.kind INTO v_workflow_id, v_kind FROM codity.workflows w
        WHERE w.project_id = v_project_id AND w.idempotency_key = p_spec ->> 'idempotency_key';
        IF v_kind = 'batch' THEN
            RAISE EXCEPTION 'idempotency key % names batch %, not a workflow', p_spec -> 'idempotency_key', v_workflow_id
                USING ERRCODE = 'CD010';
        ELSIF v_workflow_id IS NOT NULL THEN
            RETURN QUERY
            SELECT v_workflow_id, j.node_key, j.id, j.queue_id, j.status, false
            FROM codity.jobs j WHERE j.workflow_id = v_workflow_id ORDER BY j.id;
            RETURN;
        END IF;
    END IF;

    -- Each node: its shape, as a job, its key, its queue.
    FOR i IN 1 .. v_n LOOP
        v_node := v_nodes -> (i - 1);
        IF pg_catalog.jsonb_typeof(v_node) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'node % of the workflow must be a JSON object', i USING ERRCODE = 'CD010';
        END IF;
        IF pg_catalog.jsonb_typeof(v_node -> 'key') IS DISTINCT FROM 'string'
           OR pg_catalog.length(v_node ->> 'key') NOT BETWEEN 1 AND 200 THEN
            RAISE EXCEPTION 'node % of the workflow needs a "key": a string of 1 to 200 characters', i
                USING ERRCODE = 'CD010';
        END IF;
        IF v_node ? 'idempotency_key' THEN
            RAISE EXCEPTION 'node "%": a node takes no idempotency_key (give the workflow one)',
                v_node ->> 'key' USING ERRCODE = 'CD010';
        END IF;
        IF v_node - c_node_keys <> '{}'::jsonb THEN
            RAISE EXCEPTION 'node "%": unknown key "%" (allowed: %)', v_node ->> 'key',
                (SELECT k.key FROM jsonb_object_keys(v_node - c_node_keys) AS k(key) LIMIT 1),
                pg_catalog.array_to_string(c_node_keys, ', ')
                USING ERRCODE = 'CD010';
        END IF;
        IF pg_catalog.jsonb_typeof(v_node -> 'queue') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION 'node "%" needs a "queue": the name of a queue of the project', v_node ->> 'key'
                USING ERRCODE = 'CD010';
        END IF;
        v_problem := codity._job_spec_problem(v_node - ARRAY['key', 'queue', 'after']);
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION 'node "%" is invalid: %', v_node ->> 'key', v_problem USING ERRCODE = 'CD010';
        END IF;
        IF octet_length(coalesce(v_node -> 'payload', '{}'::jsonb)::text) > 65536 THEN
            RAISE EXCEPTION 'payload of node "%" is % bytes; the limit is 65536', v_node ->> 'key',
                octet_length((v_node -> 'payload')::text)
                USING ERRCODE = 'CD011', HINT = 'Store large data elsewhere and put a reference in the payload.';
        END IF;
        IF NOT v_queue_by_name ? (v_node ->> 'queue') THEN
            v_queue := codity._queue(v_node ->> 'queue', v_project_id);  -- CD001 when unknown
            v_queue_by_name := v_queue_by_name || jsonb_build_object(v_queue.name, v_queue.id);
            v_default_attempts := v_default_attempts || jsonb_build_object(v_queue.name, v_queue.max_attempts);
        END IF;
        v_keys := v_keys || (v_node ->> 'key');
        v_queue_names := v_queue_names || (v_node ->> 'queue');
        v_queue_ids := v_queue_ids || (v_queue_by_name ->> (v_node ->> 'queue'))::bigint;
    END LOOP;

    SELECT k.key INTO v_parent FROM unnest(v_keys) AS k(key) GROUP BY k.key HAVING count(*) > 1 LIMIT 1;
    IF v_parent IS NOT NULL THEN
        RAISE EXCEPTION 'node key "%" is given twice', v_parent USING ERRCODE = 'CD010';
    END IF;
    v_ord_of := (SELECT jsonb_object_agg(k.key, k.ord) FROM unnest(v_keys) WITH ORDINALITY AS k(key, ord));

    -- The edges: each "after" names another node, once.
    FOR i IN 1 .. v_n LOOP
        v_after := v_nodes -> (i - 1) -> 'after';
        CONTINUE WHEN v_after IS NULL OR v_after = 'null'::jsonb;
        IF pg_catalog.jsonb_typeof(v_after) <> 'array' THEN
            RAISE EXCEPTION 'node "%": "after" must be a JSON array of node keys', v_keys[i] USING ERRCODE = 'CD010';
        END IF;
        IF jsonb_array_length(v_after) > 10000 THEN
            RAISE EXCEPTION 'node "%" runs after % nodes; the limit is 10000', v_keys[i], jsonb_array_length(v_after)
                USING ERRCODE = 'CD010';
        END IF;
        v_runs := 0;
        FOR v_edge IN SELECT e FROM jsonb_array_elements(v_after) AS e LOOP
            IF pg_catalog.jsonb_typeof(v_edge) = 'string' THEN
                v_parent := v_edge #>> '{}';
                v_policy := v_default_policy;
            ELSIF pg_catalog.jsonb_typeof(v_edge) = 'object' AND pg_catalog.jsonb_typeof(v_edge -> 'key') = 'string'
                  AND v_edge - ARRAY['key', 'on_failure'] = '{}'::jsonb
                  AND coalesce(v_edge ->> 'on_failure', v_default_policy) IN ('cancel', 'ignore', 'hold', 'run') THEN
                v_parent := v_edge ->> 'key';
                v_policy := coalesce(v_edge ->> 'on_failure', v_default_policy);
            ELSE
                RAISE EXCEPTION 'node "%": each entry of "after" is a node key, or {"key": ..., "on_failure": "cancel", "ignore", "hold" or "run"}; got %',
                    v_keys[i], pg_catalog.left(v_edge::text, 100)
                    USING ERRCODE = 'CD010';
            END IF;
            IF v_policy = 'run' THEN
                v_runs := v_runs + 1;
            END IF;
            IF v_parent = v_keys[i] THEN
                RAISE EXCEPTION 'node "%" runs after itself', v_parent USING ERRCODE = 'CD010';
            END IF;
            v_parent_ord := (v_ord_of ->> v_parent)::integer;
            IF v_parent_ord IS NULL THEN
                RAISE EXCEPTION 'node "%" runs after "%", which is not a node of this workflow',
                    v_keys[i], pg_catalog.left(v_parent, 200) USING ERRCODE = 'CD010';
            END IF;
            v_from := v_from || v_parent_ord;
            v_to := v_to || i;
            v_policies := v_policies || v_policy;
        END LOOP;
        IF v_runs > 0 AND v_runs < jsonb_array_length(v_after) THEN
            RAISE EXCEPTION 'node "%": either every edge of a node is "run" or none is', v_keys[i]
                USING ERRCODE = 'CD010',
                      HINT = 'A "run" node runs when one of its parents is dead-lettered and is cancelled otherwise; give the other parents to another node.';
        END IF;
    END LOOP;
    IF cardinality(v_from) > 50000 THEN
        RAISE EXCEPTION 'a workflow holds at most 50000 edges, got %', cardinality(v_from) USING ERRCODE = 'CD010';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(v_from, v_to) AS e(p, c) GROUP BY e.p, e.c HAVING count(*) > 1) THEN
        SELECT v_keys[e.c], v_keys[e.p] INTO v_parent, v_policy
        FROM unnest(v_from, v_to) AS e(p, c) GROUP BY e.p, e.c HAVING count(*) > 1 LIMIT 1;
        RAISE EXCEPTION 'node "%" runs after "%" twice', v_parent, v_policy USING ERRCODE = 'CD010';
    END IF;

    -- Kahn's algorithm: a topological order exists exactly when there is no cycle; the
    -- depth of a node is one more than its deepest parent's.
    v_indegree := array_fill(0, ARRAY[v_n]);
    v_depth := array_fill(0, ARRAY[v_n]);
    FOR k IN 1 .. cardinality(v_to) LOOP
        v_indegree[v_to[k]] := v_indegree[v_to[k]] + 1;
    END LOOP;
    v_parents := v_indegree;  -- each node's number of parents: Kahn's pass counts it down
    -- Children by parent: v_by_parent[v_first[p] .. v_first[p + 1] - 1].
    v_by_parent := ARRAY(SELECT e.c FROM unnest(v_from, v_to) AS e(p, c) ORDER BY e.p, e.c);
    v_first := ARRAY(
        SELECT 1 + coalesce(pg_catalog.sum(coalesce(n.n, 0)) OVER (ORDER BY g.p ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::integer
        FROM generate_series(1, v_n + 1) AS g(p)
        LEFT JOIN (SELECT f.p, count(*) AS n FROM unnest(v_from) AS f(p) GROUP BY f.p) AS n ON n.p = g.p
        ORDER BY g.p);
    -- A queue: each node is appended once, when its last parent is taken, and read once
    -- (v_done: how many were read).
    v_stack := ARRAY(SELECT g FROM generate_series(1, v_n) AS g WHERE v_indegree[g] = 0);
    WHILE v_done < cardinality(v_stack) LOOP
        v_done := v_done + 1;
        v_at := v_stack[v_done];
        FOR k IN v_first[v_at] .. v_first[v_at + 1] - 1 LOOP
            v_child := v_by_parent[k];
            v_depth[v_child] := greatest(v_depth[v_child], v_depth[v_at] + 1);
            v_indegree[v_child] := v_indegree[v_child] - 1;
            IF v_indegree[v_child] = 0 THEN
                v_stack := v_stack || v_child;
            END IF;
        END LOOP;
    END LOOP;
    IF v_done < v_n THEN
        -- Walk from a node left over to one of its parents left over until one comes back.
        v_at := (SELECT g FROM generate_series(1, v_n) AS g WHERE v_indegree[g] > 0 LIMIT 1);
        v_cycle := ARRAY[v_keys[v_at]];
        -- Every node left over has a parent left over (or it would have been taken).
        v_by_parent := ARRAY(SELECT e.p FROM unnest(v_from, v_to) AS e(p, c)
                             WHERE v_indegree[e.c] > 0 AND v_indegree[e.p] > 0 ORDER BY e.c, e.p);
        v_first := ARRAY(SELECT e.c FROM unnest(v_from, v_to) AS e(p, c)
                         WHERE v_indegree[e.c] > 0 AND v_indegree[e.p] > 0 ORDER BY e.c, e.p);
        LOOP
            v_at := v_by_parent[array_position(v_first, v_at)];
            EXIT WHEN v_keys[v_at] = ANY (v_cycle);
            v_cycle := v_cycle || v_keys[v_at];
        END LOOP;
        v_cycle := v_cycle[array_position(v_cycle, v_keys[v_at]) :] || v_keys[v_at];
        RAISE EXCEPTION 'the workflow''s nodes wait for each other in a cycle: % (each runs after the next)',
            pg_catalog.array_to_string(v_cycle, ' -> ')
            USING ERRCODE = 'CD010';
    END IF;

    -- Written: the workflow, its nodes under ids drawn now, its edges.
    BEGIN
        INSERT INTO codity.workflows (project_id, kind, name, idempotency_key, nodes, edges, created_at, sealed_at)
        VALUES (v_project_id, 'workflow', p_spec ->> 'name', p_spec ->> 'idempotency_key', v_n, cardinality(v_from),
                p_now, p_now)
        RETURNING id INTO v_workflow_id;
    EXCEPTION WHEN unique_violation THEN
        -- The same key, enqueued by another session that committed while this one checked:
        -- its workflow, read by a statement that sees that commit; a batch's key is refused
        -- as above.
        SELECT w.id, w.kind INTO v_workflow_id, v_kind FROM codity.workflows w
        WHERE w.project_id = v_project_id AND w.idempotency_key = p_spec ->> 'idempotency_key';
        IF v_kind = 'batch' THEN
            RAISE EXCEPTION 'idempotency key % names batch %, not a workflow', p_spec -> 'idempotency_key', v_workflow_id
                USING ERRCODE = 'CD010';
        END IF;
        RETURN QUERY
        SELECT w.id, j.node_key, j.id, j.queue_id, j.status, false
        FROM codity.workflows w JOIN codity.jobs j ON j.workflow_id = w.id
        WHERE w.project_id = v_project_id AND w.idempotency_key = p_spec ->> 'idempotency_key'
        ORDER BY j.id;
        RETURN;
    END;
    v_ids := ARRAY(SELECT pg_catalog.nextval('codity.jobs_id_seq') FROM generate_series(1, v_n));
    INSERT INTO codity.jobs AS j
        (id, queue_id, project_id, task, payload, priority, status, run_at, max_attempts,
         workflow_id, node_key, deps_remaining, created_at, updated_at)
    OVERRIDING SYSTEM VALUE
    SELECT v_ids[s.ord], v_queue_ids[s.ord], v_project_id, s.node ->> 'task',
           coalesce(s.node -> 'payload', '{}'::jsonb),
           coalesce((s.node ->> 'priority')::smallint, 0::smallint),
           CASE WHEN v_parents[s.ord] > 0 THEN 'waiting'::codity.job_status
                WHEN coalesce((s.node ->> 'run_at')::timestamptz, p_now) <= p_now THEN 'queued'::codity.job_status
                ELSE 'scheduled'::codity.job_status END,
           coalesce((s.node ->> 'run_at')::timestamptz, p_now),
           coalesce((s.node ->> 'max_attempts')::integer, (v_default_attempts ->> v_queue_names[s.ord])::integer),
           v_workflow_id, v_keys[s.ord], v_parents[s.ord], p_now, p_now
    FROM jsonb_array_elements(v_nodes) WITH ORDINALITY AS s(node, ord)
    ORDER BY s.ord;
    INSERT INTO codity.job_deps
        (queue_id, parent_id, child_queue_id, child_id, child_depth, project_id, workflow_id, on_failure)
    SELECT v_queue_ids[e.p], v_ids[e.p], v_queue_ids[e.c], v_ids[e.c], v_depth[e.c], v_project_id,
           v_workflow_id, e.policy
    FROM unnest(v_from, v_to, v_policies) AS e(p, c, policy);

    PERFORM codity._notify(q.id)
    FROM codity.queues q
    WHERE q.id IN (SELECT v_queue_ids[g] FROM generate_series(1, v_n) AS g
                   WHERE v_parents[g] = 0
                     AND coalesce((v_nodes -> (g - 1) ->> 'run_at')::timestamptz, p_now) <= p_now)
      AND NOT q.is_paused;

    RETURN QUERY
    SELECT v_workflow_id, v_keys[g], v_ids[g], v_queue_ids[g],
           CASE WHEN v_parents[g] > 0 THEN 'waiting'::codity.job_status
                WHEN coalesce((v_nodes -> (g - 1) ->> 'run_at')::timestamptz, p_now) <= p_now THEN 'queued'::codity.job_status
                ELSE 'scheduled'::codity.job_status END,
           true
    FROM generate_series(1, v_n) AS g
    ORDER BY g;
END;
$$;

COMMENT ON FUNCTION codity.enqueue_workflow(jsonb, bigint, timestamptz) IS
'Enqueue a workflow: jobs (nodes) that run after others (edges), all or nothing.

p_spec: {"name", "idempotency_key", "on_failure", "nodes": [{"key", "queue", "task", "payload",
"run_at", "priority", "max_attempts", "after": ["key", {"key": "k", "on_failure": "cancel",
"ignore", "hold" or "run"}]}]}. A node runs once every node it runs after has completed,
released in the transaction that completes the last of them; a dead-lettered or cancelled
parent cancels it (on_failure "cancel", the default, and so on down the graph), counts as
done ("ignore") or holds it waiting for an operator ("hold": retry_workflow, skip_node,
cancel_workflow). A node whose edges are all "run" runs when one of those parents is
dead-lettered, and is cancelled when all settle otherwise. The workflow''s on_failure is
every edge''s default.
Nodes without a parent start queued (scheduled with a later run_at), the others waiting.
One row per node, in the order given; with an idempotency_key seen before in the project,
that workflow''s nodes with is_new = false and nothing written. Limits: 10,000 nodes,
10,000 parents a node, 50,000 edges. Raises CD001 (unknown queue), CD002 (unknown project),
CD010 (bad shape, duplicate or unknown key, a node after itself, a cycle, which it names),
CD011 (a payload over 64 KB); writes nothing then. On a Citus cluster a node is released by
the scheduler''s next tick after its last parent settled, not in that transaction.
Example: SELECT * FROM codity.enqueue_workflow(''{"nodes": [{"key": "fetch", "queue": "etl", "task": "fetch"}, {"key": "load", "queue": "etl", "task": "load", "after": ["fetch"]}]}'');';

REVOKE ALL ON FUNCTION codity.enqueue_workflow(jsonb, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.enqueue_workflow(jsonb, bigint, timestamptz) TO codity_app, codity_worker;
