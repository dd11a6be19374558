// What the bench's Node scripts share (graphile_worker.mjs, pg_boss.mjs): their arguments,
// the clock, the start line, the tally of jobs run and the result file.
//
// Copied by codity.bench._node_env beside the peer's node_modules; imports only Node's own
// modules. Times are Unix seconds with sub-millisecond precision, the clock Python's
// time.time() reads, so the harness can put them beside its own.

import { appendFileSync, existsSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

/** Unix time in seconds, sub-millisecond. */
export const now = () => (performance.timeOrigin + performance.now()) / 1000;

/** `--name value` pairs after the command word, as numbers where they are numbers. */
export function parseArgs(argv) {
  const [command, ...rest] = argv;
  const options = {};
  for (let i = 0; i < rest.length; i += 2) {
    const value = rest[i + 1];
    options[rest[i].replace(/^--/, "")] = /^-?\d+(\.\d+)?$/.test(value) ? Number(value) : value;
  }
  return { command, options };
}

/** Say ready (BENCH_READY), then wait for the harness to let every process go (BENCH_GO). */
export async function startLine() {
  const { BENCH_READY: ready, BENCH_GO: go } = process.env;
  if (ready) writeFileSync(ready, "");
  while (go && !existsSync(go)) await sleep(2);
}

/** Resolves on the first SIGTERM or SIGINT; keeps the process alive until then (a
 * pending promise alone does not). */
export const untilSignal = () =>
  new Promise((resolve) => {
    const alive = setInterval(() => {}, 60_000);
    const done = () => {
      clearInterval(alive);
      resolve();
    };
    process.once("SIGTERM", done);
    process.once("SIGINT", done);
  });

/** Jobs run by this process: how many, which payload ids, the first start and last end. */
export class Tally {
  constructor() {
    this.ran = 0;
    this.ids = new Set();
    this.first = null;
    this.last = null;
    this.starts = process.env.BENCH_STARTS || null;
  }

  /** Call at the handler's first line with the job's payload id. */
  start(id) {
    const at = now();
    if (this.first === null) this.first = at;
    this.ran += 1;
    this.ids.add(id);
    if (this.starts) appendFileSync(this.starts, `${id} ${at}\n`);
  }

  end() {
    this.last = now();
  }

  /** Written to BENCH_RESULT for the harness: {ran, distinct, first, last}. */
  write(extra = {}) {
    const result = { ran: this.ran, distinct: this.ids.size, first: this.first, last: this.last };
    if (process.env.BENCH_RESULT) {
      writeFileSync(process.env.BENCH_RESULT, JSON.stringify({ ...result, ...extra }));
    }
  }
}

/** Seeded numbers in [0, 1), the same on every run. */
export function uniform(seed) {
  let state = seed;
  return () => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state / 2147483648;
  };
}

/** 10 to 50 ms between pickup samples, as codity.bench._latency spaces Codity's. */
export function gaps(seed = 42) {
  const next = uniform(seed);
  return () => 10 + 40 * next();
}

/** The producer's answer to the harness: one JSON line on stdout. */
export const answer = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

export { sleep };
