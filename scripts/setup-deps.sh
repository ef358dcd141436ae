#!/usr/bin/env bash
# Installs the Debian packages rest.cpp builds with (as root), or prints the apt-get line to run (otherwise).
# Tools count as present when their command is on PATH, whoever installed them (node and npm often come from
# outside Debian); libraries are checked as Debian packages. Usage: scripts/setup-deps.sh [extra-package ...]
set -euo pipefail

tools=("g++:build-essential" "make:build-essential" "cmake:cmake" "ninja:ninja-build" "git:git" "npm:npm"
       "ccache:ccache" "pkg-config:pkg-config" "curl:curl")
libs=(libxxhash-dev libzstd-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
      libgtest-dev libbenchmark-dev ca-certificates nginx "$@")  # nginx: scripts/serve-replicas.sh (in /usr/sbin)

missing=()
for t in "${tools[@]}"; do
    command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
done
for p in "${libs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [ "$(id -u)" -eq 0 ]; then
    echo "rest.cpp: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    echo "rest.cpp: missing Debian packages; run:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
