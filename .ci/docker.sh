#!/usr/bin/env bash
# Make a Docker engine available to the tests: install docker.io, docker-compose (v1) and
# debootstrap when missing, start dockerd when it is not running, wait for `docker info`.
# Never fails CI by itself: without an engine the docker-marked tests skip and say why.
set -uo pipefail
SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO="sudo"
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
  echo "== docker.sh: installing ${need[*]}"
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null; }; then
    echo "docker.sh: could not install ${need[*]}; docker tests will be skipped" >&2
  fi
fi
if ! docker info >/dev/null 2>&1 && command -v dockerd >/dev/null; then
  echo "== docker.sh: starting dockerd (log: /var/log/dockerd.log)"
  ($SUDO dockerd >/var/log/dockerd.log 2>&1 &)
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi
if docker info >/dev/null 2>&1; then
  echo "== docker.sh: engine $(docker version -f '{{.Server.Version}}' 2>/dev/null) ready"
else
  echo "docker.sh: no Docker engine reachable (see /var/log/dockerd.log); docker tests will be skipped" >&2
fi
exit 0
