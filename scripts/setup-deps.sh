#!/usr/bin/env bash
# Installs the Debian packages rest.cpp builds with (as root), or prints the apt-get line to run (otherwise).
# Usage: scripts/setup-deps.sh [extra-package ...]
set -euo pipefail

pkgs=(build-essential cmake ninja-build git ca-certificates npm ccache pkg-config
      libdivsufsort-dev libxxhash-dev libzstd-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
      libgtest-dev libbenchmark-dev "$@")

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

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
