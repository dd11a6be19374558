#!/usr/bin/env bash
# A Codity worker in bash + psql, following the steps of "Writing a worker in any language"
# (docs/SQL_API.md), numbered as there. One batch at a time.
#   DATABASE_URL=postgresql://mailer:secret@127.0.0.1:55432/codity ./worker.sh emails
# Step 1: the login needs only the codity_worker role; every statement calls a function.
# Needs bash 4.4 or newer (empty arrays under set -u) and psql; nothing else.
# shellcheck disable=SC2317  # the handlers and the EXIT trap are called indirectly
set -euo pipefail

: "${DATABASE_URL:?set DATABASE_URL to a postgresql:// URL}"
PSQL="${PSQL:-psql}"          # psql from $PSQL, else from PATH
QUEUE="${1:-default}"
BATCH=10                      # jobs claimed at once: the capacity we declare
HEARTBEAT_SECONDS=3           # inside the 30 s lease and the 15 s dead-worker threshold
US=$'\x1f'                    # field separator: unlike a tab, `read` never merges two of them
log() { printf '%s %s\n' "$(date -u +%FT%TZ)" "$*"; }
pg_array() { local IFS=,; echo "{$*}"; }  # 1 2 3 -> {1,2,3}, read back as :'ids'::bigint[]
hold() {  # the jobs held now; write, then rename, so the heartbeat never reads half a file
    printf '%s\n%s\n' "$1" "$2" >"$state/held.new"
    mv "$state/held.new" "$state/held"
}

# One statement through psql. Values never enter the SQL text: each one is passed as
# `-v name=value` and written :'name' in the SQL, which psql sends as a quoted literal (psql -c
# does no such interpolation, hence stdin). Rows come back one a line, fields split by $US.
sql() {
    local script=$1
    shift
    "$PSQL" "$DATABASE_URL" --no-psqlrc --quiet --tuples-only --no-align \
        --field-separator="$US" --set=ON_ERROR_STOP=1 "$@" <<<"$script"
}
# Step 7, repeating a call: psql exits with 2 when the connection was lost, and the outcome
# is unknown. A fenced call is safe to send again: its outcome says applied, already_applied
# or stale.
report() {
    local status=0
    sql "$@" || status=$?
    if [ "$status" -ne 2 ]; then return "$status"; fi
    log "connection lost during a report; sending it again" >&2
    sql "$@"
}

# Handlers get the payload's numbers as arguments and print the JSON result. On failure they
# print the error on stderr and return 1 (retry later) or 2 (never retry: dead-letter now).
# Never hand an unchecked string to $(( )): bash evaluates it as an expression, and an array
# subscript in it can run a command. At most 18 digits: no 64-bit overflow.
INT='^-?[0-9]{1,18}$'
run_sum() {  # {"a": 1, "b": 2}
    [[ $# -eq 2 && $1 =~ $INT && $2 =~ $INT ]] || { echo "a and b must be integers" >&2; return 2; }
    printf '{"sum": %d}' "$(($1 + $2))"
}
run_sleep() {  # {"ms": 1500}
    [[ $# -eq 1 && $1 =~ ^[0-9]{1,7}$ ]] || { echo "ms must be an integer" >&2; return 2; }
    sleep "$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))"
    printf '{"slept": %d}' "$1"
}
run_fail() { echo "failing on purpose" >&2; return 1; }

# Step 2: register. The queue named is the only one this worker may claim from.
worker="$(sql "SELECT codity.register_worker(:'name', ARRAY[:'queue'], :'capacity'::int, :'host', :'pid'::int)" \
    -v name="bash-${HOSTNAME:-}-$$" -v queue="$QUEUE" -v capacity="$BATCH" -v host="${HOSTNAME:-}" -v pid=$$)"
log "worker $worker registered for $QUEUE"

# Step 8, leaving: a signal only sets a flag. The loop finishes the job in hand, releases the
# rest of its batch and ends; on any exit, deregister_worker releases whatever is still held.
stopping=0 heartbeat_pid=
state="$(mktemp -d)"  # held: the jobs the heartbeat reports; stop: the ones it found lost
hold '{}' '{}'
trap 'stopping=1' TERM INT
cleanup() {
    local status=$?
    if [ -n "$heartbeat_pid" ]; then kill "$heartbeat_pid" 2>/dev/null || true; fi
    sql "SELECT codity.deregister_worker(:'worker'::bigint)" -v worker="$worker" >/dev/null || status=1
    rm -rf "$state"
    log "stopped"
    exit "$status"
}
trap cleanup EXIT

# Step 6: heartbeat every few seconds, in the background, with the jobs held right now. A job
# that comes back lost (reaped, maybe running elsewhere) or cancelled is not run or reported.
(
    nap=
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
        sleep "$HEARTBEAT_SECONDS" & nap=$!
        wait "$nap"
        { read -r ids && read -r fences; } <"$state/held" || continue
        sql "SELECT job_id, state FROM codity.heartbeat(:'worker'::bigint, :'ids'::bigint[], :'fences'::int[])
             WHERE state IN ('lost', 'cancelled')" -v worker="$worker" -v ids="$ids" -v fences="$fences" |
            while IFS="$US" read -r job why; do
                log "job $job $why: dropping it"
                echo "$job" >>"$state/stop"
            done || log "heartbeat failed"
    done
) &
heartbeat_pid=$!

# Steps 4 and 5: claim up to BATCH jobs and start them, in one statement. bash has no JSON
# parser: PostgreSQL hands over the payload's numbers in key order, and the task name last
# with control characters replaced (one job, one line).
CLAIM_AND_START="
WITH c AS MATERIALIZED (
    SELECT * FROM codity.claim(:'worker'::bigint, :'queue', :'batch'::int) WITH ORDINALITY
), s AS MATERIALIZED (
    SELECT * FROM codity.start_many(ARRAY(SELECT job_id FROM c ORDER BY ordinality),
                                    ARRAY(SELECT fence FROM c ORDER BY ordinality))
)
SELECT c.job_id, c.fence, s.accepted,
       (SELECT string_agg(v::text, ' ' ORDER BY k) FROM jsonb_each(c.payload) AS e(k, v)
        WHERE jsonb_typeof(c.payload) = 'object' AND jsonb_typeof(v) = 'number'),
       regexp_replace(c.task, '[[:cntrl:]]', '?', 'g')
FROM c JOIN s USING (job_id) ORDER BY c.ordinality"

# Step 3, listening: psql prints a notification only after it runs a statement, so a psql
# listener would poll anyway. This worker polls claim instead: at once after a batch, every
# second when idle. Notifications are hints: polling alone is correct, only slower.
while [ "$stopping" = 0 ]; do
    batch="$(sql "$CLAIM_AND_START" -v worker="$worker" -v queue="$QUEUE" -v batch="$BATCH")" ||
        { log "claim failed; trying again"; batch=; }  # e.g. the database restarting
    if [ -z "$batch" ]; then
        sleep 1 & nap=$!
        wait "$nap" || kill "$nap" 2>/dev/null || true  # a signal ends the wait at once
        continue
    fi
    held_ids=() held_fences=() ids=() fences=() results=() left=()
    while IFS="$US" read -r job fence ok _; do
        if [ "$ok" = t ]; then held_ids+=("$job") held_fences+=("$fence"); fi
    done <<<"$batch"
    : >"$state/stop"
    hold "$(pg_array "${held_ids[@]}")" "$(pg_array "${held_fences[@]}")"
    while IFS="$US" read -r job fence ok numbers task; do
        if [ "$ok" != t ]; then log "job $job: start refused as stale; skipped"; continue; fi
        if [ "$stopping" = 1 ]; then left+=("$job" "$fence"); continue; fi
        if grep -qxF -- "$job" "$state/stop"; then continue; fi
        read -r -a args <<<"$numbers"
        status=0
        case "$task" in
            sum | sleep | fail) result="$("run_$task" "${args[@]}" 2>"$state/error")" || status=$? ;;
            *) echo "no handler for task $task" >"$state/error"; status=2 ;;
        esac
        if [ "$status" -eq 0 ]; then
            ids+=("$job") fences+=("$fence") results+=("$result")  # completed below, in one call
            continue
        fi
        # Ctrl-C reaches the handler too (same process group): give the job back, do not fail it.
        if [ "$stopping" = 1 ]; then left+=("$job" "$fence"); continue; fi
        # Step 7: fail with the error, retryable unless the handler said never (status 2).
        retryable=true
        if [ "$status" -eq 2 ]; then retryable=false; fi
        report "SELECT outcome, detail FROM codity.fail(:'job'::bigint, :'fence'::int, :'error', :'retryable'::bool)" \
            -v job="$job" -v fence="$fence" -v error="$(head -c 4000 "$state/error")" -v retryable=$retryable |
            while IFS="$US" read -r outcome detail; do log "job $job failed ($outcome): $detail"; done
    done <<<"$batch"

    # Step 7: complete the batch in one call, the results as one JSON array that SQL unpacks.
    # A stale answer means the lease was lost and the job may run elsewhere: drop the result.
    if [ "${#ids[@]}" -gt 0 ]; then
        report "SELECT job_id, detail FROM codity.complete_many(:'ids'::bigint[], :'fences'::int[],
                  ARRAY(SELECT r FROM jsonb_array_elements(:'results'::jsonb) WITH ORDINALITY AS e(r, n) ORDER BY n))
                WHERE outcome = 'stale'" \
            -v ids="$(pg_array "${ids[@]}")" -v fences="$(pg_array "${fences[@]}")" \
            -v results="[$(IFS=,; echo "${results[*]}")]" |
            while IFS="$US" read -r job detail; do log "job $job: complete refused as stale ($detail); dropped"; done
    fi
    # Shutting down: give back what we did not run, attempt not charged.
    for ((i = 0; i < ${#left[@]}; i += 2)); do
        report "SELECT outcome FROM codity.release(:'job'::bigint, :'fence'::int)" \
            -v job="${left[i]}" -v fence="${left[i + 1]}" |
            while read -r outcome; do log "job ${left[i]} released ($outcome)"; done
    done
    hold '{}' '{}'
done
exit 0
