#!/usr/bin/env bash
# What tests/test_compose.py needs on a machine like CI's, set up if missing (idempotent):
#   - a running Docker engine (Debian's docker.io; dockerd started here, log in /tmp),
#   - both Compose implementations the compose file must work with: docker-compose 1.29
#     (Debian bookworm) and Compose v2 (the `docker compose` plugin, taken from Debian
#     trixie's docker-compose package, checked against the hash below),
#   - debootstrap, which builds the test's base image (no image registry is reachable).
# Run as root. Prints the versions it ends with.
set -euo pipefail

compose_v2_deb="docker-compose_2.26.1-4_amd64.deb"
compose_v2_sha256="47681197cb2b1ab88206b42a1a92fc75f50d9530a6322d03494a473eed0408ea"
compose_v2_url="http://deb.debian.org/debian/pool/main/d/docker-compose/$compose_v2_deb"
plugin_dir=/usr/local/lib/docker/cli-plugins

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if ((${#missing[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi

if ! docker compose version >/dev/null 2>&1; then
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    curl -fsS --retry 3 -o "$work/$compose_v2_deb" "$compose_v2_url"
    echo "$compose_v2_sha256  $work/$compose_v2_deb" | sha256sum -c --quiet -
    dpkg-deb -x "$work/$compose_v2_deb" "$work/root"
    mkdir -p "$plugin_dir"
    install -m 755 "$work/root/usr/libexec/docker/cli-plugins/docker-compose" "$plugin_dir/"
fi

if ! docker info >/dev/null 2>&1; then
    nohup dockerd >/tmp/codity-dockerd.log 2>&1 &
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    if ! docker info >/dev/null 2>&1; then
        echo "dockerd did not start:" >&2
        tail -20 /tmp/codity-dockerd.log >&2
        exit 1
    fi
fi

docker info --format 'Docker engine {{.ServerVersion}}'
docker compose version
docker-compose version --short | sed 's/^/docker-compose /'
