#!/usr/bin/env bash
# The two images tests/test_compose.py substitutes for registry images it cannot pull here:
#   codity-test/base:bookworm   for python:3.12-slim (BASE_IMAGE): Debian bookworm from
#                               debootstrap with python3 and venv, and the host's CA bundle
#   codity-test/postgres:15     for postgres:18 (POSTGRES_IMAGE): Debian's postgresql-15 on
#                               that base, with an entrypoint that honours the official
#                               image's POSTGRES_PASSWORD / POSTGRES_USER / POSTGRES_DB
# Idempotent: the base is built once per engine, the PostgreSQL image from Docker's cache.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
base=codity-test/base:bookworm
postgres=codity-test/postgres:15

if ! docker image inspect "$base" >/dev/null 2>&1; then
    rootfs="$(mktemp -d /tmp/codity-base.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
    # The host's bundle: what pip and apt inside the containers must trust to reach PyPI
    # and Debian from here.
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        - "$base" >/dev/null
fi

docker build -q --build-arg BASE_IMAGE="$base" -t "$postgres" "$here/postgres" >/dev/null
echo "$base $postgres"
