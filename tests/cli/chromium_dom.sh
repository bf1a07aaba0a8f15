#!/usr/bin/env bash
# Prints the DOM headless Chromium builds from an HTML file opened from disk (no network), so
# a test can check what the page really renders. Usage: chromium_dom.sh FILE.html
# Fails (exit 1) when Chromium is missing: `make test` installs it (scripts/setup.sh test).
set -euo pipefail
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then echo "chromium not installed (make test installs it)" >&2; exit 1; fi
profile=$(mktemp -d); trap 'rm -rf "$profile"' EXIT
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --dump-dom "file://$(realpath "$1")" 2> /dev/null
