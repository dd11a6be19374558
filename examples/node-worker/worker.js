// A Codity worker in Node with the `pg` package, following the steps of "Writing a worker in
// any language" (docs/SQL_API.md), numbered as there.
//   DATABASE_URL=postgresql://mailer:secret@127.0.0.1:55432/codity node worker.js emails
// Step 1: the login needs only the codity_worker role; every statement calls a function.
'use strict';
const os = require('node:os');
const { setTimeout: sleep } = require('node:timers/promises');
const pg = require('pg');

const url = process.env.DATABASE_URL;
const queues = process.argv.length > 2 ? process.argv.slice(2) : ['default'];
const capacity = Number(process.env.CODITY_CAPACITY || 10); // jobs run at once
const HEARTBEAT_MS = 3000; // inside the 30 s lease and the 15 s dead-worker threshold
const POLL_MS = 5000; // the safety net: a notification is a hint and may never arrive
const GRACE_MS = 5000; // on SIGTERM, how long running handlers may still finish

// Handlers: task -> async (payload, {signal}) => JSON result. Throwing fails the job, retried
// with backoff unless err.retryable === false. `signal` aborts when the job is lost.
const handlers = {
  sum: async ({ a, b }) => ({ sum: a + b }),
  sleep: async ({ ms }, { signal }) => sleep(ms, { slept: ms }, { signal }),
  fail: async () => { throw new Error('failing on purpose'); },
};
const noHandler = async () => { throw Object.assign(new Error('no handler'), { retryable: false }); };

const log = (...args) => console.log(new Date().toISOString(), ...args);
const pool = new pg.Pool({ connectionString: url, max: 4 });
pool.on('error', (err) => log('idle connection lost:', err.message)); // the pool replaces it
const query = async (sql, params) => (await pool.query(sql, params)).rows;

let workerId; // from register_worker; every later call names it
const queueIds = new Set(); // the queue ids (text) that our notifications carry
const held = new Map(); // job id -> { fence, abort }: what we hold, for heartbeats and the drain
let stopping = false, listener = null;

// Step 7, repeating a call: a dropped connection leaves a call's outcome unknown. A fenced
// call is safe to send again: its outcome says applied, already_applied or stale.
const connectionLost = (err) => !(err instanceof pg.DatabaseError) || /^(08|57P)/.test(err.code);
async function report(sql, params) {
  try { return await query(sql, params); } catch (err) {
    if (!connectionLost(err)) throw err;
    log('connection lost during a report; sending it again:', err.message);
    return query(sql, params);
  }
}
// 'stale': our lease is gone (reaped, maybe done elsewhere, or cancelled). Drop the result.
function accepted(jobId, call, row) {
  if (row.outcome === 'stale') log(`job ${jobId}: ${call} refused as stale (${row.detail}); dropped`);
  return row.accepted;
}

// Step 3: LISTEN on a connection of its own; a notification's payload is a queue id.
// Notifications sent while we are disconnected are lost: claim after every (re)connect.
function listen(delay = 500) {
  const client = new pg.Client({ connectionString: url });
  client.on('notification', (msg) => queueIds.has(msg.payload) && pump());
  client.on('error', (err) => log('listener:', err.message)); // 'end' follows
  client.once('end', () => stopping || setTimeout(listen, delay, Math.min(2 * delay, 30000)));
  client.connect().then(() => client.query('LISTEN codity_v1')).then(() => {
    listener = client;
    delay = 500; // connected: the next reconnect starts its backoff afresh
    pump();
  }, (err) => { log('listener:', err.message); client.end().catch(() => {}); }); // 'end' retries
}

// Step 4: claim up to our free capacity, one queue per call. Claim rounds run one after the
// other (a promise chain), so two wake-ups never hand out the same free slots.
let claiming = Promise.resolve();
const pump = () => (claiming = claiming.then(claimRound));
async function claimRound() {
  for (const queue of queues) {
    const free = capacity - held.size;
    if (stopping || free <= 0) return;
    try {
      const jobs = await query('SELECT * FROM codity.claim($1, $2, $3)', [workerId, queue, free]);
      if (jobs.length) runBatch(jobs);
      if (jobs.length === free) pump(); // the queue may hold more
    } catch (err) { // e.g. CD005 after missed heartbeats: the next heartbeat revives us
      log('claim failed:', err.message);
    }
  }
}

// Step 5: start the batch in one round trip, right before its handlers run.
async function runBatch(jobs) {
  for (const j of jobs) held.set(j.job_id, { fence: j.fence, abort: new AbortController() });
  const started = await report('SELECT * FROM codity.start_many($1::bigint[], $2::int[])',
    [jobs.map((j) => j.job_id), jobs.map((j) => j.fence)]).catch((err) => log('start:', err.message));
  jobs.forEach((j, i) => (started && accepted(j.job_id, 'start', started[i]) ? runJob(j) : forget(j)));
}
const forget = (j) => held.get(j.job_id)?.fence === j.fence && held.delete(j.job_id);

// Each job is reported as soon as its handler ends: a slow job holds up no other.
async function runJob(j) {
  const { abort } = held.get(j.job_id);
  let call, sql, params;
  try {
    const result = await (handlers[j.task] ?? noHandler)(j.payload, { signal: abort.signal });
    [call, sql] = ['complete', 'SELECT * FROM codity.complete($1, $2, $3)'];
    params = [j.job_id, j.fence, JSON.stringify(result ?? null)];
  } catch (err) {
    [call, sql] = ['fail', 'SELECT * FROM codity.fail($1, $2, $3, $4)'];
    params = [j.job_id, j.fence, String(err?.message ?? err), err?.retryable !== false];
  }
  // Step 7: report once, unless the job was lost, cancelled or released meanwhile.
  try {
    if (held.get(j.job_id)?.fence !== j.fence || abort.signal.aborted) return;
    const [row] = await report(sql, params);
    if (accepted(j.job_id, call, row) && call === 'fail') log(`job ${j.job_id} failed: ${row.detail}`);
  } catch (err) { // unreported, it comes back when its lease expires, attempt refunded
    log(`job ${j.job_id}: ${call} failed:`, err.message);
  } finally {
    forget(j);
    pump(); // a slot is free again
  }
}

// Step 6: heartbeat with every job we hold; stop the ones that come back lost or cancelled.
async function heartbeat() {
  const ids = [...held.keys()], fences = ids.map((id) => held.get(id).fence);
  const rows = await query('SELECT * FROM codity.heartbeat($1, $2::bigint[], $3::int[])',
    [workerId, ids, fences]).catch((err) => log('heartbeat failed:', err.message)) ?? [];
  for (const r of rows.filter((r) => r.state === 'lost' || r.state === 'cancelled')) {
    if (held.get(r.job_id)?.fence !== r.fence) continue;
    log(`job ${r.job_id} ${r.state}: dropping it`);
    held.get(r.job_id).abort.abort();
    held.delete(r.job_id);
  }
}

// Step 8: on SIGTERM/SIGINT stop claiming, give running handlers a grace period, release
// what is still held (attempt not charged), deregister, exit 0.
async function shutdown(signal) {
  if (stopping) return;
  stopping = true;
  log(`${signal}: draining ${held.size} job(s)`);
  listener?.end().catch(() => {});
  for (let waited = 0; held.size && waited < GRACE_MS; waited += 100) await sleep(100);
  for (const [id, { fence, abort }] of held) {
    abort.abort(); // its handler may still be running: whatever it returns is dropped
    const [r] = await report('SELECT * FROM codity.release($1, $2)', [id, fence]).catch(() => [{}]);
    log(`job ${id}: released (${r.outcome ?? 'call failed; deregister_worker releases it'})`);
  }
  await query('SELECT codity.deregister_worker($1)', [workerId]); // releases anything left
  await pool.end();
  log('stopped');
  process.exit(0);
}

async function main() {
  // Step 2: register; we may claim only from the queues we name.
  const host = os.hostname();
  [{ id: workerId }] = await query('SELECT codity.register_worker($1, $2, $3, $4, $5) AS id',
    [`node-${host}-${process.pid}`, queues, capacity, host, process.pid]);
  const mine = await query('SELECT queue_id FROM codity.worker_queues($1)', [workerId]);
  mine.forEach((q) => queueIds.add(String(q.queue_id)));
  log(`worker ${workerId} registered for ${queues.join(', ')}`);
  ['SIGTERM', 'SIGINT'].forEach((sig) => process.on(sig, () => shutdown(sig)));
  setInterval(heartbeat, HEARTBEAT_MS);
  setInterval(pump, POLL_MS);
  listen();
  pump(); // jobs may be waiting since before we started
}
main().catch((err) => { log('fatal:', err.message); process.exit(1); });
