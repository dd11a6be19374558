#!/usr/bin/env bash
# What the failover tests (./test -m failover, tests/autofailover.py) need on a machine like
# CI's, installed if missing (idempotent): pg_auto_failover's pg_autoctl and its monitor
# extension, from Debian, for the PostgreSQL major Debian ships there (15 on Debian 12
# bookworm, 17 on Debian 13 trixie), with that PostgreSQL's server binaries:
#   postgresql-<N>, postgresql-<N>-auto-failover, pg-auto-failover-cli.
# The clusters themselves are made by the tests, as the postgres user the server package
# creates. Run as root. Prints the versions it ends with.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
    echo "scripts/autofailover_prereqs.sh installs Debian packages: run it as root" >&2
    exit 1
fi

# The PostgreSQL major: the newest one whose auto-failover extension is installed already,
# else Debian's own for this release.
major() {
    local found
    found="$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/lib/pgautofailover.so' \
        2>/dev/null | sed -E 's|^/usr/lib/postgresql/([0-9]+)/.*|\1|' | sort -n | tail -1 || true)"
    if [[ -n $found ]]; then
        echo "$found"
        return
    fi
    case "$(cut -d. -f1 /etc/debian_version 2>/dev/null)" in
        12 | bookworm*) echo 15 ;;
        13 | trixie*) echo 17 ;;
        *)
            # Another release: the newest postgresql-N-auto-failover the archive offers.
            apt-get update -qq
            apt-cache search --names-only '^postgresql-[0-9]+-auto-failover$' |
                sed -E 's/^postgresql-([0-9]+)-.*/\1/' | sort -n | tail -1
            ;;
    esac
}

n="$(major)"
missing=()
command -v pg_autoctl >/dev/null 2>&1 || missing+=(pg-auto-failover-cli)
dpkg -s "postgresql-$n-auto-failover" >/dev/null 2>&1 || missing+=("postgresql-$n-auto-failover")
[[ -x /usr/lib/postgresql/$n/bin/postgres ]] || missing+=("postgresql-$n")
if ((${#missing[@]})); then
    apt-get update -qq
    # The server package would create and start a cluster of its own (main, port 5432):
    # policy-rc.d keeps it from starting, and the tests never use it.
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        made_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
    if ((made_policy)); then
        rm -f "$policy"
    fi
fi

if [[ -z $n || ! -x /usr/lib/postgresql/$n/bin/postgres ]] || ! command -v pg_autoctl >/dev/null; then
    echo "pg_auto_failover for PostgreSQL ${n:-?} is not installed after apt-get install" >&2
    exit 1
fi
pg_autoctl --version | sed -n 1p
"/usr/lib/postgresql/$n/bin/postgres" --version
echo "PGBIN /usr/lib/postgresql/$n/bin"
