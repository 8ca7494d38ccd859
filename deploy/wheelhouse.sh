#!/usr/bin/env bash
# Download every wheel the images install into deploy/.wheelhouse/{services,trainer} on the
# host, so `docker build` installs with `pip install --no-index` and needs no network.
#   deploy/wheelhouse.sh [--python-version 3.11]   (default: the base image's Python)
# Versions are the exact ones of ../constraints.txt (what `make setup` and CI install).
# Cached: does nothing when the requirements, constraints, extras and Python version are unchanged.
# POWERTRIP_TORCH_INDEX=https://download.pytorch.org/whl/cu124 picks a CUDA torch for GPU VMs.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${POWERTRIP_WHEELHOUSE:-$HERE/.wheelhouse}
BASE_IMAGE=${BASE_IMAGE:-powertrip-base:bookworm}
PYVER=""
if [[ "${1:-}" == "--python-version" ]]; then PYVER=$2; fi
if [[ -z "$PYVER" ]] && command -v docker >/dev/null && docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  PYVER=$(docker run --rm "$BASE_IMAGE" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
fi
PYVER=${PYVER:-$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
PIP=${PIP:-python3 -m pip}
EXTRAS=${POWERTRIP_TRAINER_EXTRAS:-}
KEY=$(cat "$HERE/requirements-services.txt" "$HERE/requirements-trainer.txt" "$HERE/../constraints.txt" | sha256sum | cut -c1-16)-py$PYVER-${EXTRAS// /_}-${POWERTRIP_TORCH_INDEX:-}
# Prometheus for its image: Debian's package, fetched by apt on the host
DEBS=$HERE/prometheus/debs
if ! ls "$DEBS"/prometheus_*.deb >/dev/null 2>&1 && command -v apt-get >/dev/null; then
  (cd "$DEBS" && apt-get download prometheus >/dev/null 2>&1) \
    || echo "wheelhouse: apt-get download prometheus failed; its image build will use apt" >&2
fi
if [[ -f "$OUT/.stamp" && "$(cat "$OUT/.stamp")" == "$KEY" ]]; then
  echo "wheelhouse: up to date in $OUT (python $PYVER)"
  exit 0
fi
rm -rf "$OUT" && mkdir -p "$OUT/services" "$OUT/trainer"
# glibc 2.36 (bookworm) runs every manylinux up to 2_36 (cryptography ships 2_34 only);
# pip wants each tag named
TARGET=(--only-binary=:all: --python-version "$PYVER" --implementation cp
        --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
        --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform manylinux2010_x86_64
        --platform manylinux1_x86_64 --platform linux_x86_64)
echo "wheelhouse: python $PYVER -> $OUT"
$PIP download -q "${TARGET[@]}" -c "$HERE/../constraints.txt" -d "$OUT/services" -r "$HERE/requirements-services.txt"
grep -vE '^\s*(#|$)' "$HERE/requirements-services.txt" > "$OUT/services/requirements.txt"
INDEX=()
[[ -n "${POWERTRIP_TORCH_INDEX:-}" ]] && INDEX=(--extra-index-url "$POWERTRIP_TORCH_INDEX")
# trainer: only what services does not already have
$PIP download -q "${TARGET[@]}" "${INDEX[@]}" -c "$HERE/../constraints.txt" -d "$OUT/trainer" -r "$HERE/requirements-trainer.txt" $EXTRAS
for whl in "$OUT"/services/*.whl; do rm -f "$OUT/trainer/$(basename "$whl")"; done
{ grep -vE '^\s*(#|$)' "$HERE/requirements-trainer.txt"; for e in $EXTRAS; do echo "$e"; done; } > "$OUT/trainer/requirements.txt"
echo "$KEY" > "$OUT/.stamp"
du -sh "$OUT/services" "$OUT/trainer"
