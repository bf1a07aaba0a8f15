#!/usr/bin/env bash
# Installs the Debian packages tpusim builds with, only those missing; apt is skipped
# entirely when everything is already present. Idempotent; safe to run on every `make`.
# `setup.sh test` also installs what the test suite needs (headless Chromium for the HTML checks,
# clang-format for the conventions check, pytest, pandas, matplotlib and Dask's distributed for
# the Python package's tests and example).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libsimgrid-dev libboost-graph-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  catch2 libcli11-dev libopenblas-dev libbenchmark-dev
  python3-dev pybind11-dev python3-pandas
)
if [ "${1:-}" = "test" ]; then
  packages+=(chromium clang-format python3-pytest python3-matplotlib python3-distributed)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing missing Debian packages: ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
