// Graphile Worker's side of `codity bench --against graphile-worker`: its schema, workers
// and producer, through its own JS API. Run with the Node of the machine from the npm
// prefix the bench installed it into (codity.bench._node_env), where this file is copied.
//
//   node graphile_worker.mjs migrate                      its schema (runMigrations)
//   node graphile_worker.mjs drain --concurrency C --local-queue L --batch-delay D
//       runOnce, as `graphile-worker --once` (what its perfTest times): run every job, exit
//       when none is left. L = 0: no local queue; D = -1: no batched completion (its
//       defaults). Held at the start line (_bench.mjs); writes its tally and when runOnce
//       returned (`finished`) to BENCH_RESULT,
//       then waits for SIGTERM so that the harness reads its CPU while it is alive.
//   node graphile_worker.mjs work                          a worker at its defaults (run)
//       whose handler appends `id start` to BENCH_STARTS; stops on SIGTERM.
//   node graphile_worker.mjs enqueue --jobs N --batch B   addJob one by one, or addJobs
//       B per call (WorkerUtils); prints {"seconds": ...}
//   node graphile_worker.mjs pickup --samples N           addJob one at a time, 10-50 ms
//       apart; prints {"samples": [[id, sent, acked], ...]}
//
// BENCH_DSN is the scratch database. NO_LOG_SUCCESS=1 (set by the harness) keeps its
// logger from writing a line per job, as its perfTest does.

import { makeWorkerUtils, run, runMigrations, runOnce } from "graphile-worker";

import { answer, gaps, now, parseArgs, sleep, startLine, Tally, untilSignal } from "./_bench.mjs";

const NOOP = "bench_noop";
const PICKUP = "bench_pickup";
const connectionString = process.env.BENCH_DSN;

/** Its preset: defaults, unless the harness asked for its tuned shape. */
function preset({ concurrency = 1, "local-queue": localQueue = 0, "batch-delay": delay = -1 }) {
  const worker = { connectionString, concurrentJobs: concurrency, maxPoolSize: concurrency + 1 };
  if (localQueue > 0) worker.localQueue = { size: localQueue };
  if (delay >= 0) Object.assign(worker, { completeJobBatchDelay: delay, failJobBatchDelay: delay });
  return { worker };
}

function tasks(tally) {
  const handler = (payload) => {
    tally.start(payload.id);
    tally.end();
  };
  return { [NOOP]: handler, [PICKUP]: handler };
}

async function drain(options) {
  const tally = new Tally();
  const signal = untilSignal();
  await startLine();
  await runOnce({ preset: preset(options), taskList: tasks(tally), noHandleSignals: true });
  tally.write({ finished: now() }); // every completion committed: runOnce flushed its batch
  await signal;
}

async function work() {
  const tally = new Tally();
  const signal = untilSignal();
  const runner = await run({ preset: preset({}), taskList: tasks(tally), noHandleSignals: true });
  await startLine();
  await signal;
  await runner.stop();
  tally.write();
}

async function enqueue({ jobs, batch }) {
  const utils = await makeWorkerUtils({ connectionString });
  try {
    const began = performance.now();
    if (batch === 1) {
      for (let id = 0; id < jobs; id++) await utils.addJob(NOOP, { id });
    } else {
      for (let done = 0; done < jobs; done += batch) {
        const size = Math.min(batch, jobs - done);
        const specs = Array.from({ length: size }, (_, i) => ({
          identifier: NOOP,
          payload: { id: done + i },
        }));
        const added = await utils.addJobs(specs);
        if (added.length !== size) throw new Error(`addJobs added ${added.length} of ${size}`);
      }
    }
    answer({ seconds: (performance.now() - began) / 1000 });
  } finally {
    await utils.release();
  }
}

async function pickup({ samples }) {
  const utils = await makeWorkerUtils({ connectionString });
  const gap = gaps();
  const found = [];
  try {
    for (let id = 0; id < samples; id++) {
      const sent = now();
      await utils.addJob(PICKUP, { id });
      found.push([id, sent, now()]);
      await sleep(gap());
    }
  } finally {
    await utils.release();
  }
  answer({ samples: found });
}

const { command, options } = parseArgs(process.argv.slice(2));
const commands = {
  migrate: () => runMigrations({ connectionString }).then(() => answer({ migrated: true })),
  drain: () => drain(options),
  work,
  enqueue: () => enqueue(options),
  pickup: () => pickup(options),
};
if (!(command in commands)) {
  console.error(`usage: graphile_worker.mjs ${Object.keys(commands).join("|")} ...`);
  process.exit(2);
}
await commands[command]();
process.exit(0);
