#!/usr/bin/env bash
# A swarm "node" on one host: a container running its own dockerd (Docker-in-Docker), so a
# multi-node Docker Swarm can be tried on one machine. tests/e2e/test_swarm_multinode.py
# uses it; an operator can reproduce the test's nodes with the same two commands:
#
#   deploy/swarm/dind-node.sh build                 # prints the image tag (last line)
#   deploy/swarm/dind-node.sh start NAME NETWORK BIP DIR [docker-run options...]
#   docker -H unix://DIR/sock/docker.sock info      # the node's own engine
#
# build: the image offline like deploy/build-base.sh (no registry): debootstrap of Debian
#   with docker.io from the mirror apt already uses, then `docker import`. Its tag is a hash
#   of the suite and packages (powertrip-dind-node:<hash>): a second run reuses the image.
# start: the flags that work without --privileged (refused on hosts whose capability
#   bounding set lacks CAP_SYS_RESOURCE, "unable to apply caps"): every capability but
#   SYS_RESOURCE, no seccomp/AppArmor profile, /sys/fs/cgroup writable. The inner dockerd
#   keeps /var/lib/docker in DIR/docker, a host directory (not a tmpfs: the images would
#   sit in RAM), with the storage driver POWERTRIP_DIND_STORAGE: vfs by default (works
#   everywhere, but copies a whole image per layer and per container: ~20 s and ~2.4 GB for
#   each container of the 1.2 GB trainer image here), or overlay2, which worked here with
#   DIR on ext4 (a container starts in ~2 s; the test tries it first and falls back to vfs).
#   BIP is the node's docker0 address (the test uses 10.210.N.1/24): each node's own,
#   outside the node network's range. Load images into a node with
#   `docker save IMAGE | docker -H unix://DIR/sock/docker.sock load` (it starts with none);
#   for vfs a one-layer image (docker export | docker import) is copied once, not per layer.
#   Remove a node with `docker rm -f NAME && rm -rf DIR`.
set -euo pipefail
SUITE=${POWERTRIP_DIND_SUITE:-bookworm}
PACKAGES=docker.io,iproute2,ca-certificates,procps
# the tag hashes what goes into the image (not the rest of this script)
HASH=$(printf '%s\n' "$SUITE" "$PACKAGES" "vfs-1" | sha256sum | cut -c1-12)
TAG=${POWERTRIP_DIND_TAG:-powertrip-dind-node:$HASH}

build() {
  if [[ "${1:-}" != "--force" ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "dind-node: $TAG already exists (build --force to rebuild)" >&2
    echo "$TAG"
    return 0
  fi
  command -v debootstrap >/dev/null || { echo "dind-node: debootstrap is not installed (apt-get install -y debootstrap)" >&2; exit 2; }
  [[ $(id -u) == 0 ]] || { echo "dind-node: debootstrap needs root" >&2; exit 2; }
  local mirror rootfs
  mirror=${POWERTRIP_BASE_MIRROR:-$(grep -rhoE '^(URIs:|deb) *https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
    | grep -E '/debian/?$' | head -1 | sed -E 's/^(URIs:|deb) *//' || true)}
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d /tmp/powertrip-dind-rootfs.XXXXXX)
  # shellcheck disable=SC2064  # expand now: the trap runs after this function's locals are gone
  trap "rm -rf '$rootfs' '$rootfs.log'" EXIT
  echo "dind-node: debootstrap $SUITE (docker.io) from $mirror into $rootfs" >&2
  debootstrap --variant=minbase --include="$PACKAGES" \
    "$SUITE" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || { tail -20 "$rootfs.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | docker import --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["dockerd", "--storage-driver=vfs"]' - "$TAG" >/dev/null
  echo "dind-node: built $TAG ($(docker run --rm "$TAG" dockerd --version))" >&2
  echo "$TAG"
}

start() {
  [[ $# -ge 4 ]] || { echo "usage: $0 start NAME NETWORK BIP DIR [docker-run options...]" >&2; exit 2; }
  local name=$1 network=$2 bip=$3 dir=$4
  shift 4
  mkdir -p "$dir/docker" "$dir/sock"
  # --hostname: the swarm's node name. The inner dockerd also listens on DIR/sock/docker.sock,
  # so the host's CLI can drive it (docker -H unix://DIR/sock/docker.sock) without docker exec
  docker run -d --name "$name" --hostname "$name" --network "$network" \
    --cap-add ALL --cap-drop SYS_RESOURCE \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --security-opt systempaths=unconfined \
    -v /sys/fs/cgroup:/sys/fs/cgroup:rw -v "$dir/docker":/var/lib/docker \
    -v "$dir/sock":/run/node --tmpfs /run --label powertrip.dind-node=1 "$@" \
    "$TAG" dockerd --storage-driver="${POWERTRIP_DIND_STORAGE:-vfs}" --bip="$bip" \
    --host=unix:///var/run/docker.sock --host=unix:///run/node/docker.sock >/dev/null
  for _ in $(seq 90); do
    if docker exec "$name" docker info >/dev/null 2>&1; then
      echo "$name"
      return 0
    fi
    [[ $(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null) == true ]] || break
    sleep 1
  done
  echo "dind-node: the dockerd in $name did not come up:" >&2
  docker logs --tail 30 "$name" >&2 || true
  exit 1
}

case "${1:-build}" in
  build) shift || true; build "$@" ;;
  start) shift; start "$@" ;;
  tag) echo "$TAG" ;;
  *) echo "usage: $0 [build [--force] | start NAME NETWORK BIP DIR [docker-run options...] | tag]" >&2; exit 2 ;;
esac
