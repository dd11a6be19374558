"""The ``codity`` command: one entry point for the database, migrations and processes."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

import psycopg

from codity.cli_checks import UsageError, configure_logging, require_free_port
from codity.config import Settings, load_settings
from codity.db import database_url, embedded_server, migrate
from codity.db.citus import BODIES, JOB_TABLES, REFERENCE_TABLES, CitusError
from codity.db.embedded import EmbeddedServerError
from codity.db.errors import CodityError
from codity.queue_settings import POLICY
from codity.stop_signal import StopSignal

__all__ = ["main"]

log = logging.getLogger("codity")


def _cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    if settings.database_url and args.action != "url":
        print("DATABASE_URL is set: the embedded server is not used.", file=sys.stderr)
        if args.action == "psql":
            return subprocess.call(["psql", settings.database_url, *args.psql_args])
        return 1
    server = embedded_server(settings)
    if args.action == "start":
        server.start()
        server.ensure_database()
        print(f"running: {server.version()} on 127.0.0.1:{server.port}, data in {server.pgdata}")
        print(server.url())
    elif args.action == "stop":
        print("stopped" if server.stop() else "not running")
    elif args.action == "status":
        running = server.is_running()
        print(f"{'running' if running else 'stopped'}: data in {server.pgdata}, port {server.port}")
        return 0 if running else 3
    elif args.action == "url":
        print(database_url(settings, start=False))
    elif args.action == "psql":
        if not server.is_running():
            raise UsageError("the embedded database is stopped; start it with `codity db start`")
        return subprocess.call([str(server.bin_dir / "psql"), server.url(), *args.psql_args])
    return 0


def _cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    if args.shards is not None and not args.citus:
        raise UsageError("migrate: --shards goes with --citus")
    if args.shards is not None and not 1 <= args.shards <= 1024:
        raise UsageError("migrate: --shards must be from 1 to 1024")
    url = database_url(settings)
    try:
        applied, functions = migrate(url, citus=args.citus, shards=args.shards)
    except CitusError as exc:
        raise UsageError(str(exc)) from exc
    print(f"migrated: {applied} new migration(s), {functions} function file(s) applied")
    if args.service_logins:
        from codity.db.service_logins import write_service_urls

        folder = write_service_urls(url, settings.home)
        print(f"service logins: each service's URL in {folder}/<web|scheduler|worker>")
    if args.citus:
        print(
            f"distributed on Citus: {len(JOB_TABLES)} job tables by queue_id,"
            f" {len(REFERENCE_TABLES)} reference tables, {len(BODIES)} functions by queue"
        )
    return 0


def _stop_signal() -> StopSignal:
    return StopSignal().install(signal.SIGINT, signal.SIGTERM)


def _running_url(settings: Settings) -> str:
    """Where a one-shot read connects: never starts the embedded server (after `codity db
    stop`, `status` says so instead of bringing it back)."""
    url = database_url(settings, start=False)
    if not settings.database_url and not embedded_server(settings).is_running():
        raise UsageError("the embedded database is stopped; start it with `codity db start`")
    return url


def _url_without_starting(settings: Settings, command: str) -> str:
    """Where a long-running process connects; it never starts the embedded server itself.

    Only ``codity up`` and ``codity db start`` do: a worker restarted while the database is
    stopped for maintenance must not bring it back. It waits for it instead (its loops retry).
    """
    url = database_url(settings, start=False)
    if not settings.database_url and not embedded_server(settings).is_running():
        print(
            f"codity {command}: the embedded database is not running; waiting for it"
            " (start it with `codity db start`, or run everything with `codity up`)",
            file=sys.stderr,
        )
    return url


def _cmd_scheduler(args: argparse.Namespace, settings: Settings) -> int:
    from codity.scheduler import run_scheduler

    url = _url_without_starting(settings, "scheduler")
    run_scheduler(url, args.tick_ms, _stop_signal())
    return 0


def _cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from codity.worker.main import load_registry, run_worker
    from codity.worker.runtime import WorkerConfig
    from codity.worker.served import QueueSpec

    try:
        for queue in args.queue:
            QueueSpec.parse(queue)
        registry = load_registry(args.app, args.app_dir)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    prefetch = args.prefetch
    if prefetch is None and os.environ.get("WORKER_PREFETCH"):
        prefetch = _env_int("WORKER_PREFETCH", 0, least=0)
    if args.concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, got {args.concurrency}")
    if prefetch is not None and prefetch < 0:
        raise UsageError(f"--prefetch must be 0 or more, got {prefetch}")
    config = WorkerConfig(
        queues=tuple(args.queue),
        concurrency=args.concurrency,
        prefetch=prefetch,
        heartbeat_s=_env_ms("WORKER_HEARTBEAT_MS", 5000) / 1000,
        poll_s=_env_ms("WORKER_POLL_INTERVAL_MS", 5000) / 1000,
        grace_s=_env_ms("SHUTDOWN_GRACE_MS", 30000) / 1000,
        listen=not args.no_listen,
        direct_to_nodes=not args.through_coordinator,
        **({"name": args.name} if args.name else {}),
    )
    run_worker(_url_without_starting(settings, "worker"), registry, config)
    return 0


def _env_ms(name: str, default: int) -> int:
    return _env_int(name, default, what="a whole number of milliseconds")


def _env_int(name: str, default: int, *, what: str = "a whole number", least: int = 1) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise SystemExit(f"codity: {name} must be {what}, got {value!r}") from None
    if parsed < least:
        raise SystemExit(f"codity: {name} must be {least} or more, got {parsed}")
    return parsed


def _env_flag(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise SystemExit(f"codity: {name} must be 1 or 0 (true or false), got {value!r}")


def _cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from codity.db.service_logins import service_urls
    from codity.demo import DEMO_OPERATOR_EMAIL, DEMO_OPERATOR_PASSWORD, seed_demo
    from codity.supervisor import ChildSpec, Supervisor, serves

    require_free_port(args.host, args.port)  # before anything starts, like the database's
    url = database_url(settings)
    migrate(url)
    if args.demo:
        counts = seed_demo(url)
        print(f"demo data seeded: {counts}")
    queues = args.queue or _default_project_queues(url)
    base = f"http://{args.host}:{args.port}"
    # Asked from here: a wildcard address is not one to connect to.
    local = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(args.host, args.host)
    if ":" in local and not local.startswith("["):
        local = f"[{local}]"
    logins = {
        s: {"DATABASE_URL": u, "DATABASE_URL_FILE": ""}
        for s, u in service_urls(url, settings.home).items()
    }
    children = [
        ChildSpec(
            "web",
            ["web", "--host", args.host, "--port", str(args.port)],
            ready=serves(f"http://{local}:{args.port}/livez"),
            env=logins["web"],
        ),
        ChildSpec(
            "scheduler", ["scheduler", "--tick-ms", str(args.tick_ms)], env=logins["scheduler"]
        ),
    ]
    if queues:
        queue_args = [arg for q in queues for arg in ("--queue", q)]
        children += [
            ChildSpec(
                f"worker-{i}",
                ["worker", "--app", args.app, *queue_args, "--concurrency", str(args.concurrency)],
                env=logins["worker"],
            )
            for i in range(1, args.workers + 1)
        ]
    else:
        print("no queues yet: starting the scheduler only (create queues, or use --demo)")
    served = ", ".join(queues) or "-"
    workers = args.workers if queues else 0
    print(f"starting the web app, the scheduler and {workers} worker(s)...", flush=True)

    def announce() -> None:
        print(f"Codity is up. Dashboard: {base}/")
        if args.demo:
            print(f"  sign in as {DEMO_OPERATOR_EMAIL} / {DEMO_OPERATOR_PASSWORD}")
        print(f"  API and docs: {base}/api/v1/docs")
        print(f"  database: {url}")
        print(f"  scheduler + {workers} worker(s) on {served}; Ctrl-C stops", flush=True)

    env = dict(os.environ, DATABASE_URL=url)
    grace_s = _env_ms("SHUTDOWN_GRACE_MS", 30000) / 1000
    return Supervisor(children, env=env, grace_s=grace_s, on_ready=announce).run()


def _cmd_web(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from codity.web.app import create_app
    from codity.web.settings import load_web_settings

    require_free_port(args.host, args.port)
    url = database_url(settings)
    try:
        web_settings = load_web_settings(settings.home)
    except ValueError as exc:
        raise UsageError(f"web: {exc}") from None
    logging.getLogger("uvicorn.access").disabled = True
    base = f"http://{args.host}:{args.port}"
    print(
        f"Codity dashboard on {base}/ (API docs: {base}/api/v1/docs, health: {base}/readyz)",
        flush=True,
    )
    uvicorn.run(
        create_app(url, web_settings),
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=10,
    )
    return 0


def _default_project_queues(url: str) -> list[str]:
    import psycopg

    from codity.db.conninfo import conninfo

    with psycopg.connect(conninfo(url)) as conn:
        rows = conn.execute(
            "SELECT o.queue FROM codity.queue_overview o "
            "JOIN codity.projects p ON p.id = o.project_id WHERE p.is_default ORDER BY o.queue"
        ).fetchall()
    return [r[0] for r in rows]


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from codity.demo import seed_demo

    url = database_url(settings)
    migrate(url)
    if args.if_empty and (queues := _default_project_queues(url)):
        print(f"demo data not seeded: the default project already has queues ({', '.join(queues)})")
        return 0
    print(f"demo data seeded: {seed_demo(url)}")
    return 0


def _cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from codity.status import StatusRefused, collect_status, render_status

    try:
        status = collect_status(_running_url(settings))
    except StatusRefused as exc:
        raise UsageError(str(exc)) from exc
    print(render_status(status, as_json=args.json))
    return 0


def _cmd_queue(args: argparse.Namespace, settings: Settings) -> int:
    from codity.queue_settings import render_queue, set_queue

    policy = {key: getattr(args, key) for key in POLICY if getattr(args, key) is not None}
    pause = True if args.pause else False if args.resume else None
    queue = set_queue(database_url(settings), args.name, args.project, policy, pause)
    print(render_queue(queue))
    return 0


def _cmd_resume(args: argparse.Namespace, settings: Settings) -> int:
    import psycopg

    from codity.db.conninfo import conninfo

    with psycopg.connect(conninfo(database_url(settings))) as conn:
        row = conn.execute("SELECT * FROM codity.resume_all()").fetchone()
    assert row is not None
    print(f"resumed {row[0]} queue(s) and {row[1]} schedule(s)")
    return 0


def _cmd_alive(args: argparse.Namespace, settings: Settings) -> int:
    from codity.health_file import verdict

    code, line = verdict(args.within)
    if code == 2:
        raise UsageError(line)
    print(line, file=sys.stdout if code == 0 else sys.stderr)
    return code


def _cmd_explain(args: argparse.Namespace, settings: Settings) -> int:
    from codity.explain import write_explain

    url = database_url(settings)
    path = write_explain(url, jobs=args.jobs, waiting=args.waiting)
    print(f"wrote {path}")
    return 0


def _cmd_sql_reference(args: argparse.Namespace, settings: Settings) -> int:
    from codity.sql_reference import write_reference

    print(f"wrote {write_reference(database_url(settings))}")
    return 0


def _cmd_api_reference(args: argparse.Namespace, settings: Settings) -> int:
    from codity.web.reference import write_route_table
    from codity.web.routes import ALL_ROUTES

    print(f"wrote {write_route_table(ALL_ROUTES)}")
    return 0


def _cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    from codity.bench import BenchError, run_command

    try:
        if args.citus:
            from codity.bench.citus_bench import run_citus_command

            if args.against:
                raise UsageError("bench: --citus and --against are two different runs")
            try:
                return run_citus_command(
                    quick=args.quick,
                    jobs=args.jobs,
                    workers=args.workers,
                    concurrency=args.concurrency,
                    write=not args.no_write,
                    command=_bench_command(args),
                )
            except KeyboardInterrupt:
                print("codity bench: interrupted; the servers it started are gone", file=sys.stderr)
                return 130
        if args.cost_model:
            from codity.bench.cost_model import run_cost_model_command

            if args.against or args.citus or args.fairness or args.workers or args.concurrency:
                raise UsageError("bench --cost-model runs its own phases: only --quick, --jobs"
                                 " and --no-write go with it")  # fmt: skip
            return run_cost_model_command(
                home=settings.home, quick=args.quick, jobs=args.jobs, write=not args.no_write
            )
        if args.fairness:
            from codity.bench.fairness import run_fairness_command

            if args.against or args.citus or args.workers or args.concurrency:
                raise UsageError("bench --fairness runs its own scenario: no other option")
            return run_fairness_command(
                database_url(settings),
                bulk=args.jobs or (5_000 if args.quick else 50_000),
                rate=10.0,
                write=not args.no_write,
            )
        if args.against:
            from codity.bench.against_peers import run_peers_command
            from codity.bench.against_pgqueuer import run_against_command

            if args.workers is not None or args.concurrency is not None:
                raise UsageError("bench --against runs its own matrix: no --workers/--concurrency")
            if args.against != "pgqueuer":
                return run_peers_command(
                    database_url(settings),
                    home=settings.home,
                    against=args.against,
                    quick=args.quick,
                    jobs=args.jobs,
                    write=not args.no_write,
                )
            return run_against_command(
                database_url(settings),
                home=settings.home,
                quick=args.quick,
                jobs=args.jobs,
                write=not args.no_write,
            )
        return run_command(
            database_url(settings),
            pg_bin=settings.pg_bin,
            quick=args.quick,
            workers=args.workers,
            concurrency=args.concurrency,
            jobs=args.jobs,
            write=not args.no_write,
        )
    except BenchError as exc:
        print(f"codity bench: {exc}", file=sys.stderr)
        return 1


def _bench_command(args: argparse.Namespace) -> str:
    """The bench's command line as run, for the record it writes."""
    words = ["./codity bench", "--citus" if args.citus else ""]
    words += ["--quick" if args.quick else "", "--no-write" if args.no_write else ""]
    for flag in ("workers", "concurrency", "jobs"):
        value = getattr(args, flag)
        words.append(f"--{flag} {value}" if value is not None else "")
    return " ".join(w for w in words if w)


def _cmd_soak(args: argparse.Namespace, settings: Settings) -> int:
    from codity.bench import BenchError
    from codity.bench.soak import SoakOptions, run_soak_command

    try:
        options = SoakOptions(
            minutes=args.minutes,
            rate=args.rate,
            workers=args.workers,
            concurrency=args.concurrency,
            keep=args.keep,
            sample=args.sample,
        ).checked()  # before the database: a bad option costs nothing
        return run_soak_command(database_url(settings), options)
    except BenchError as exc:
        print(f"codity soak: {exc}", file=sys.stderr)
        return 1


def _cmd_bench_dashboard(args: argparse.Namespace, settings: Settings) -> int:
    from codity.bench.dashboard_run import run_dashboard_command

    if args.jobs < 1000 or args.pages < 1:
        raise UsageError("bench-dashboard: --jobs must be at least 1000 and --pages at least 1")
    if args.citus:
        from codity.bench.dashboard_citus import run_dashboard_citus_command

        try:
            return run_dashboard_citus_command(
                jobs=args.jobs, pages=args.pages, write=not args.no_write
            )
        except KeyboardInterrupt:
            print("codity bench-dashboard: interrupted; its servers are gone", file=sys.stderr)
            return 130
    return run_dashboard_command(
        database_url(settings), jobs=args.jobs, pages=args.pages, write=not args.no_write
    )


def _parser() -> argparse.ArgumentParser:
    tick_default = int(os.environ.get("SCHEDULER_TICK_MS") or 1000)
    web_host = os.environ.get("CODITY_WEB_HOST") or "127.0.0.1"
    web_port = int(os.environ.get("PORT") or 3000)
    parser = argparse.ArgumentParser(prog="codity", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    parser.add_argument(
        "--log-format",
        choices=["auto", "text", "json"],
        default=os.environ.get("CODITY_LOG_FORMAT") or "auto",
        help="text for a terminal, JSON lines otherwise (auto); CODITY_LOG_FORMAT",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    db = sub.add_parser("db", help="the embedded PostgreSQL server")
    db.add_argument("action", choices=["start", "stop", "status", "url", "psql"])
    db.add_argument("psql_args", nargs=argparse.REMAINDER, help="psql: arguments passed on")
    db.set_defaults(func=_cmd_db)

    migrate_cmd = sub.add_parser("migrate", help="apply migrations and functions")
    migrate_cmd.add_argument(
        "--citus",
        action="store_true",
        help="on a Citus coordinator: distribute the job tables by queue and the hot functions"
        " with them (idempotent; docs/RUNBOOK.md, Running on Citus)",
    )
    migrate_cmd.add_argument(
        "--shards",
        type=int,
        help="with --citus, on the first distribution: shards per job table (default 4 per"
        " worker node, at least 8)",
    )
    migrate_cmd.add_argument(
        "--service-logins",
        action="store_true",
        help="then make one login per service, holding only its role, as `codity up` does, and"
        " write each service's URL to CODITY_HOME/service-urls/<web|scheduler|worker> for"
        " DATABASE_URL_FILE (docker-compose.yml)",
    )
    migrate_cmd.set_defaults(func=_cmd_migrate)

    scheduler = sub.add_parser("scheduler", help="call codity.tick() on a timer")
    scheduler.add_argument("--tick-ms", type=int, default=tick_default, help="SCHEDULER_TICK_MS")
    scheduler.set_defaults(func=_cmd_scheduler)

    up = sub.add_parser("up", help="database, migrations, web, scheduler and workers, supervised")
    up.add_argument("--demo", action="store_true", help="reset and seed the demo data set first")
    up.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    up.add_argument(
        "--app", default="codity.worker.demo:registry", help="module:registry of handlers"
    )
    up.add_argument("--queue", action="append", help="queues to serve (default: every queue)")
    up.add_argument("--concurrency", type=int, default=_env_int("WORKER_CAPACITY", 5))
    up.add_argument("--tick-ms", type=int, default=tick_default, help="SCHEDULER_TICK_MS")
    up.add_argument("--host", default=web_host, help="web app address (CODITY_WEB_HOST)")
    up.add_argument("--port", type=int, default=web_port, help="web app port (PORT, 3000)")
    up.set_defaults(func=_cmd_up)

    web = sub.add_parser("web", help="the HTTP API and its docs (uvicorn)")
    web.add_argument("--host", default=web_host, help="address to bind (CODITY_WEB_HOST)")
    web.add_argument("--port", type=int, default=web_port, help="port (PORT, default 3000)")
    web.set_defaults(func=_cmd_web)

    demo = sub.add_parser("demo", help="reset and seed the demo data set")
    demo.add_argument(
        "--if-empty",
        action="store_true",
        help="seed only when the default project has no queue yet (docker-compose.yml's setup)",
    )
    demo.set_defaults(func=_cmd_demo)
    status = sub.add_parser("status", help="queues, workers and schedules at a glance")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=_cmd_status)
    alive = sub.add_parser(
        "alive",
        help="exit 0 if this container's worker or scheduler marked CODITY_HEALTH_FILE lately"
        " (a healthcheck)",
    )
    alive.add_argument(
        "--within", type=float, default=20.0, help="seconds since its last success (20)"
    )
    alive.set_defaults(func=_cmd_alive)
    sub.add_parser("resume", help="un-pause every queue and schedule").set_defaults(
        func=_cmd_resume
    )

    queue = sub.add_parser(
        "queue",
        help="create a queue or change its settings (weight, limits, lease); show them",
        description="Create the queue NAME (when it does not exist) or change the settings"
        " given; every other setting keeps its value. Prints the settings afterwards.",
    )
    queue.add_argument("name", help="the queue's name")
    queue.add_argument(
        "--project", help="its project, by slug or id (default: the installation's default)"
    )
    for key, what in POLICY.items():
        queue.add_argument(f"--{key.replace('_', '-')}", dest=key, type=int, help=what)
    paused = queue.add_mutually_exclusive_group()
    paused.add_argument("--pause", action="store_true", help="stop claims from it")
    paused.add_argument("--resume", action="store_true", help="let claims take from it again")
    queue.set_defaults(func=_cmd_queue)

    worker = sub.add_parser("worker", help="run jobs: claim, run handlers, report back")
    worker.add_argument("--app", required=True, help="module:registry holding the handlers")
    worker.add_argument(
        "--queue",
        action="append",
        required=True,
        help="a queue to serve (repeatable): NAME in the default project, PROJECT/NAME in"
        " another (its slug or id), PROJECT/* for its every queue; one worker serving several"
        " projects shares its room equally among those with work",
    )
    worker.add_argument(
        "--concurrency",
        type=int,
        default=_env_int("WORKER_CAPACITY", 5),
        help="WORKER_CAPACITY (5)",
    )
    worker.add_argument(
        "--prefetch",
        type=int,
        default=None,
        help="WORKER_PREFETCH: claimed jobs held beyond --concurrency, waiting for a slot"
        " (default: 3 x --concurrency; 0 for long jobs)",
    )
    worker.add_argument(
        "--app-dir",
        default=".",
        help="folder put first on the import path for --app (default: the current one)",
    )
    worker.add_argument("--name", help="worker name (default host-pid)")
    worker.add_argument("--no-listen", action="store_true", help="poll only (benchmarks)")
    worker.add_argument(
        "--through-coordinator",
        action="store_true",
        default=_env_flag("WORKER_THROUGH_COORDINATOR"),
        help="WORKER_THROUGH_COORDINATOR: on a Citus cluster, send every call to the"
        " coordinator, not each queue's calls to the node that holds it",
    )
    worker.set_defaults(func=_cmd_worker)

    explain = sub.add_parser("explain", help="regenerate docs/EXPLAIN.md from real plans")
    explain.add_argument("--jobs", type=int, default=100_000, help="jobs to load (default 100000)")
    explain.add_argument(
        "--waiting",
        type=int,
        default=1_000_000,
        help="jobs waiting on parents to add for the section on workflows (default 1000000;"
        " 0 leaves it out)",
    )
    explain.set_defaults(func=_cmd_explain)

    sub.add_parser(
        "sql-reference", help="regenerate docs/SQL_API.md from the catalogue"
    ).set_defaults(func=_cmd_sql_reference)

    sub.add_parser(
        "api-reference", help="regenerate the route table of docs/API_CONTRACT.md"
    ).set_defaults(func=_cmd_api_reference)

    bench = sub.add_parser("bench", help="measure throughput and latency; docs/PERFORMANCE.md")
    bench.add_argument("--quick", action="store_true", help="small sizes (tests, a first look)")
    bench.add_argument("--workers", type=int, help="worker processes for the drain (default 2)")
    bench.add_argument("--concurrency", type=int, help="per worker, = claim size (default 100)")
    bench.add_argument("--jobs", type=int, help="jobs to drain (default 20000)")
    bench.add_argument("--no-write", action="store_true", help="leave docs/PERFORMANCE.md alone")
    bench.add_argument(
        "--against",
        choices=["pgqueuer", "graphile-worker", "pg-boss", "all"],
        help="side by side with PGQueuer 1.6 (a virtual environment of its own), Graphile"
        " Worker 0.17 or pg-boss 10 (npm, into the bench's own folder), or all three",
    )
    bench.add_argument(
        "--citus",
        action="store_true",
        help="plain PostgreSQL 18 against a 3-node Citus cluster, both started for the run"
        " (DATABASE_URL unused); docs/PERFORMANCE.md, 'Codity on Citus'",
    )
    bench.add_argument(
        "--fairness",
        action="store_true",
        help="a backlog in one queue beside 10 jobs/s into another, two workers serving both"
        " (issue 26); docs/PERFORMANCE.md, 'Fair share between queues'",
    )
    bench.add_argument(
        "--cost-model",
        action="store_true",
        help="what one job costs the database from enqueue to completion (WAL, statements,"
        " row versions, index entries), Codity beside Graphile Worker and PGQueuer, on a"
        " server started for the run; docs/PERFORMANCE.md, 'The cost of one job'",
    )
    bench.set_defaults(func=_cmd_bench)

    soak = sub.add_parser(
        "soak", help="a long run at half the drain rate with pruning on; exit 1 if not steady"
    )
    soak.add_argument("--minutes", type=float, default=10, help="how long to soak (10)")
    soak.add_argument(
        "--rate", type=float, help="jobs/s offered (default: half of a drain measured first)"
    )
    soak.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    soak.add_argument("--concurrency", type=int, default=100, help="per worker (100)")
    soak.add_argument(
        "--keep", type=int, default=60, help="seconds the queue keeps completed jobs (60)"
    )
    soak.add_argument("--sample", type=float, default=30, help="seconds between rows (30)")
    soak.set_defaults(func=_cmd_soak)

    dash = sub.add_parser(
        "bench-dashboard", help="dashboard page times at 1M jobs, 200 live pages; PERFORMANCE.md"
    )
    dash.add_argument("--jobs", type=int, default=1_000_000, help="jobs to load (1,000,000)")
    dash.add_argument("--pages", type=int, default=200, help="live pages to open (200)")
    dash.add_argument("--no-write", action="store_true", help="leave docs/PERFORMANCE.md alone")
    dash.add_argument(
        "--citus",
        action="store_true",
        help="the same pages on plain PostgreSQL 18 and on a 3-node Citus cluster, both started"
        " for the run (DATABASE_URL unused)",
    )
    dash.set_defaults(func=_cmd_bench_dashboard)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(logging.DEBUG if args.verbose else logging.INFO, args.log_format)
    try:
        return int(args.func(args, load_settings()))
    except (EmbeddedServerError, UsageError) as exc:
        print(f"codity: {exc}", file=sys.stderr)
        return 2
    except CodityError as exc:  # the database refused what the command line asked for
        hint = f" ({exc.hint})" if exc.hint else ""
        print(f"codity: {exc.message}{hint} [{exc.sqlstate}]", file=sys.stderr)
        return 2
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"codity: cannot reach the database: {first}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `codity status | head`: the reader left. Say nothing more, and do not let Python
        # complain about the closed stdout on the way out.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
