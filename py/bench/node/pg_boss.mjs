// pg-boss's side of `codity bench --against pg-boss`: its schema, workers and producer,
// through its own JS API. Run with the Node of the machine from the npm prefix the bench
// installed it into (codity.bench._node_env), where this file is copied.
//
//   node pg_boss.mjs install                 its schema (start() migrates) and the queues
//   node pg_boss.mjs work --batch B --workers W --poll S
//       one PgBoss instance at its defaults with W work() loops on the queue, each fetching
//       up to B jobs every S seconds (its defaults: W 1, B 1, S 2). Held at the start line
//       (_bench.mjs); on SIGTERM it stops (graceful: waits for the jobs in hand) and
//       writes its tally to BENCH_RESULT. Its handler appends `id start` to BENCH_STARTS.
//   node pg_boss.mjs enqueue --jobs N --batch B   send() one by one, or insert() B per
//       call; prints {"seconds": ...}
//   node pg_boss.mjs pickup --samples N --starts FILE --spread MS
//       send() one at a time and wait until the worker has started it (FILE gains its
//       line), then 10-50 ms plus a random part of MS (its polling interval): a polling
//       worker would otherwise face a backlog rather than one job, and a fixed gap would
//       lock the sends to its polls; prints {"samples": [[id, sent, acked], ...]}
//
// BENCH_DSN is the scratch database. The producer's instance runs no maintenance and no
// cron (supervise, schedule off): it only sends.

import { readFileSync } from "node:fs";

import PgBoss from "pg-boss";

import {
  answer,
  gaps,
  now,
  parseArgs,
  sleep,
  startLine,
  Tally,
  uniform,
  untilSignal,
} from "./_bench.mjs";

const NOOP = "bench_noop";
const PICKUP = "bench_pickup";
const connectionString = process.env.BENCH_DSN;

async function boss(options = {}) {
  const instance = new PgBoss({ connectionString, ...options });
  instance.on("error", (error) => console.error(error));
  await instance.start();
  return instance;
}

const producer = () => boss({ supervise: false, schedule: false, migrate: false });

async function install() {
  const instance = await boss();
  for (const queue of [NOOP, PICKUP]) await instance.createQueue(queue);
  await instance.stop({ graceful: false });
  answer({ installed: true });
}

async function work({ batch = 1, workers = 1, poll = 2, queue = NOOP }) {
  const tally = new Tally();
  const signal = untilSignal();
  const instance = await boss();
  await startLine();
  const handler = async (jobs) => {
    for (const job of jobs) tally.start(job.data.id);
    tally.end();
  };
  const options = { batchSize: batch, pollingIntervalSeconds: poll };
  for (let i = 0; i < workers; i++) await instance.work(queue, options, handler);
  await signal;
  await instance.stop({ graceful: true, wait: true, timeout: 10000 });
  tally.write();
}

async function enqueue({ jobs, batch }) {
  const instance = await producer();
  try {
    const began = performance.now();
    if (batch === 1) {
      for (let id = 0; id < jobs; id++) await instance.send(NOOP, { id });
    } else {
      for (let done = 0; done < jobs; done += batch) {
        const size = Math.min(batch, jobs - done);
        await instance.insert(Array.from({ length: size }, (_, i) => ({
          name: NOOP,
          data: { id: done + i },
        })));
      }
    }
    answer({ seconds: (performance.now() - began) / 1000 });
  } finally {
    await instance.stop({ graceful: false });
  }
}

const started = (path) => {
  try {
    return readFileSync(path, "utf8").split("\n").filter(Boolean).length;
  } catch {
    return 0;
  }
};

async function pickup({ samples, starts, spread = 0 }) {
  const instance = await producer();
  const gap = gaps();
  const fraction = uniform(7);
  const found = [];
  try {
    for (let id = 0; id < samples; id++) {
      const sent = now();
      await instance.send(PICKUP, { id });
      found.push([id, sent, now()]);
      const deadline = Date.now() + 30000;
      while (started(starts) <= id) {
        if (Date.now() > deadline) throw new Error(`job ${id} not started within 30 s`);
        await sleep(2);
      }
      await sleep(gap() + spread * fraction());
    }
  } finally {
    await instance.stop({ graceful: false });
  }
  answer({ samples: found });
}

const { command, options } = parseArgs(process.argv.slice(2));
const commands = {
  install,
  work: () => work(options),
  enqueue: () => enqueue(options),
  pickup: () => pickup(options),
};
if (!(command in commands)) {
  console.error(`usage: pg_boss.mjs ${Object.keys(commands).join("|")} ...`);
  process.exit(2);
}
await commands[command]();
process.exit(0);
