"""``codity bench``: throughput, pickup latency, the raw-SQL ceiling and claim cost, in one run.

Everything happens in a scratch database created on the target server and dropped at the
end (codity.explain.scratch_database), in this order, so that ratios compare figures
taken minutes apart on the same machine::

    enqueue      codity.enqueue one by one; codity.enqueue_many in batches of 1,000
    pickup       enqueue COMMIT -> handler start, one idle worker: NOTIFY, poll only, and
                 NOTIFY with the worker's commits not flushed (a diagnostic)
    rounds       ceiling, then drain, five times:
      ceiling    the worker's claim-and-start + complete_many loop from pgbench, no Python
      drain      N bench.noop jobs through W `codity worker` processes x concurrency C
    claim cost   codity.claim(worker, queue, 10) with 10,000 and 1,000,000 jobs queued

The figures are printed as a table and written to docs/PERFORMANCE.md (``--no-write``
leaves it alone). Performance is measured here, never asserted in tests.
"""

from codity.bench._model import BenchOptions, Report
from codity.bench._run import pgbench_path, run_bench, run_command
from codity.bench._workers import BenchError

__all__ = ["BenchError", "BenchOptions", "Report", "pgbench_path", "run_bench", "run_command"]
