#!/usr/bin/env bash
# What tests/test_compose.py needs on a machine like CI's, set up if missing (idempotent):
#   - a running Docker engine (Debian's docker.io; dockerd started here, log in /tmp),
#   - both Compose implementations the compose file must work with: docker-compose 1.29
#     (Debian bookworm) and Compose v2 (the `docker compose` plugin, a static Go binary
#     taken from Debian trixie's docker-compose package: the release file's signature is
#     checked against the Debian archive keyring, and the package against the hashes it
#     signs, so a new package version in trixie is taken, never an unchecked one),
#   - debootstrap, which builds the test's base image (no image registry is reachable).
# Run as root. Prints the versions it ends with.
set -euo pipefail

mirror=http://deb.debian.org/debian
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

install_compose_v2() {
    local work arch packages_sha deb_path deb_sha
    work="$(mktemp -d)"
    arch="$(dpkg --print-architecture)"
    curl -fsS --retry 3 -o "$work/InRelease" "$mirror/dists/trixie/InRelease"
    if ! gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg \
        --output "$work/Release" "$work/InRelease" 2>"$work/gpgv.log"; then
        echo "trixie's InRelease does not verify against the Debian archive keyring:" >&2
        cat "$work/gpgv.log" >&2
        exit 1
    fi
    packages_sha="$(awk -v f="main/binary-$arch/Packages.xz" \
        '/^SHA256:/ {s = 1; next} /^[^ ]/ {s = 0} s && $3 == f {print $1}' "$work/Release")"
    curl -fsS --retry 3 -o "$work/Packages.xz" "$mirror/dists/trixie/main/binary-$arch/Packages.xz"
    echo "$packages_sha  $work/Packages.xz" | sha256sum -c --quiet -
    read -r deb_path deb_sha < <(xz -dc "$work/Packages.xz" | awk '
        /^Package: docker-compose$/ {p = 1}
        p && /^Filename:/ {f = $2}
        p && /^SHA256:/ {h = $2}
        p && /^$/ {print f, h; exit}')
    curl -fsS --retry 3 -o "$work/compose.deb" "$mirror/$deb_path"
    echo "$deb_sha  $work/compose.deb" | sha256sum -c --quiet -
    dpkg-deb -x "$work/compose.deb" "$work/root"
    mkdir -p "$plugin_dir"
    install -m 755 "$work/root/usr/libexec/docker/cli-plugins/docker-compose" "$plugin_dir/"
    rm -rf "$work"
}

if ! docker compose version >/dev/null 2>&1; then
    install_compose_v2
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
