#!/usr/bin/env bash
# Build the images' base offline: a Debian bookworm root file system made by debootstrap
# from the Debian mirror apt already uses, imported as `powertrip-base:bookworm` (Python 3.11).
# Use it where no image registry is reachable:
#   deploy/build-base.sh && docker build --build-arg BASE_IMAGE=powertrip-base:bookworm ...
# A no-op when the image already exists (pass --force to rebuild).
set -euo pipefail
TAG=${POWERTRIP_BASE_TAG:-powertrip-base:bookworm}
SUITE=${POWERTRIP_BASE_SUITE:-bookworm}
if [[ "${1:-}" != "--force" ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "build-base: $TAG already exists (use --force to rebuild)"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "build-base: debootstrap is not installed (apt-get install -y debootstrap)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "build-base: debootstrap needs root" >&2; exit 2; }
# the mirror apt is configured with on this host (falls back to deb.debian.org)
MIRROR=${POWERTRIP_BASE_MIRROR:-$(grep -rhoE '^(URIs:|deb) *https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
  | grep -E '/debian/?$' | head -1 | sed -E 's/^(URIs:|deb) *//' || true)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
ROOTFS=$(mktemp -d /tmp/powertrip-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
echo "build-base: debootstrap $SUITE from $MIRROR into $ROOTFS"
debootstrap --variant=minbase \
  --include=python3,python3-venv,python3-pip,iproute2,ca-certificates \
  "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || { tail -20 "$ROOTFS.log" >&2; exit 1; }
rm -f "$ROOTFS.log"
# keep the image small: no apt lists or caches
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/cache/apt/archives/*.deb
tar -C "$ROOTFS" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$TAG" >/dev/null
echo "build-base: built $TAG ($(docker run --rm "$TAG" python3 --version))"
