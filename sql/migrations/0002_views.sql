-- Read models for operators and the readonly role: views over the private tables.
-- Views run with their owner's rights, so codity_readonly reads them without table access.
-- depends: 0001_schema

CREATE VIEW codity.queue_overview AS
SELECT q.project_id,
       q.id AS queue_id,
       q.name AS queue,
       q.is_paused,
       count(*) FILTER (WHERE j.status = 'queued' AND j.run_at <= now()) AS claimable,
       count(*) FILTER (WHERE j.status = 'scheduled' OR (j.status = 'queued' AND j.run_at > now())) AS scheduled,
       count(*) FILTER (WHERE j.status IN ('claimed', 'running')) AS running,
       count(*) FILTER (WHERE j.status = 'completed') AS completed,
       count(*) FILTER (WHERE j.status = 'dead_letter') AS dead,
       count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled,
       now() - min(j.run_at) FILTER (WHERE j.status = 'queued' AND j.run_at <= now()) AS oldest_claimable_age
FROM codity.queues q
LEFT JOIN codity.jobs j ON j.queue_id = q.id
GROUP BY q.project_id, q.id, q.name, q.is_paused;

COMMENT ON VIEW codity.queue_overview IS 'Per queue: jobs claimable now, scheduled, running, completed, dead, cancelled, and the age of the oldest claimable job.';

CREATE VIEW codity.worker_overview AS
SELECT w.id AS worker_id,
       w.name,
       w.host,
       w.pid,
       w.queues,
       w.capacity,
       w.status,
       w.started_at,
       w.last_heartbeat_at,
       now() - w.last_heartbeat_at AS heartbeat_age,
       (SELECT count(*) FROM codity.jobs j WHERE j.worker_id = w.id AND j.status IN ('claimed', 'running')) AS jobs_held
FROM codity.workers w;

COMMENT ON VIEW codity.worker_overview IS 'Workers with their liveness (status, heartbeat age) and how many jobs each holds.';

CREATE VIEW codity.schedule_overview AS
SELECT s.project_id, s.id AS schedule_id, s.name, q.name AS queue, s.cron, s.time_zone, s.task,
       s.is_paused, s.next_run_at, s.last_run_at, s.last_job_id
FROM codity.scheduled_jobs s
JOIN codity.queues q ON q.id = s.queue_id;

COMMENT ON VIEW codity.schedule_overview IS 'Cron schedules with their queue, next and last run.';

GRANT SELECT ON codity.queue_overview, codity.worker_overview, codity.schedule_overview
    TO codity_app, codity_readonly;
