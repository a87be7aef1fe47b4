#!/usr/bin/env bash
# Usage: run.sh KILN_BINARY SCREENSHOT_DIR
#
# The dashboard's browser test (docs/dashboard.md): serves the tiny-chat model (random weights,
# Qwen3 tokenizer) twice on free ports, once with a random API key (--api-key-file, a file of
# mode 0600) and once without, installs the pinned playwright-core npm package when node_modules
# is missing (no browser download: it drives Debian's chromium), runs dashboard.test.mjs against
# both with node:test, saves a screenshot of every panel into SCREENSHOT_DIR, stops the servers and
# exits with the node test's status. Prints "SKIPPED: <reason>" and exits 0 only when chromium,
# node/npm or the Qwen3 tokenizer is missing.
set -uo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 KILN_BINARY SCREENSHOT_DIR" >&2
  exit 2
fi
KILN=$(realpath "$1")
SHOTS=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)

if [ ! -x "$KILN" ]; then
  echo "run.sh: $KILN is not an executable" >&2
  exit 2
fi
# The browser binary itself (Debian's /usr/bin/chromium is a shell wrapper around it).
CHROMIUM=${KILN_CHROMIUM:-}
if [ -z "$CHROMIUM" ]; then
  for c in /usr/lib/chromium/chromium "$(command -v chromium 2>/dev/null)" "$(command -v chromium-browser 2>/dev/null)"; do
    if [ -n "$c" ] && [ -x "$c" ]; then CHROMIUM=$c; break; fi
  done
fi
if [ -z "$CHROMIUM" ]; then
  echo "SKIPPED: chromium is not installed (Debian package 'chromium'; scripts/setup installs it)"
  exit 0
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "SKIPPED: node and npm are needed for the dashboard browser test (not found in PATH)"
  exit 0
fi

TOKDIR=${KILN_TOKENIZER_DIR:-$ROOT/.cache/tokenizers/qwen3}
if [ ! -f "$TOKDIR/tokenizer.json" ] || [ ! -f "$TOKDIR/tokenizer_config.json" ]; then
  if [ -z "${KILN_TOKENIZER_DIR:-}" ]; then
    "$ROOT/scripts/fetch-tokenizer" >/dev/null 2>&1 || true
  fi
  if [ ! -f "$TOKDIR/tokenizer.json" ] || [ ! -f "$TOKDIR/tokenizer_config.json" ]; then
    echo "SKIPPED: the Qwen3 tokenizer is not in $TOKDIR and could not be fetched (scripts/fetch-tokenizer)"
    exit 0
  fi
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-dashboard.XXXXXX")
source "$HERE/../serve_tiny_chat.sh"
OPEN_PID=
cleanup() {
  stop_server
  SERVER_PID=$OPEN_PID
  stop_server
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# playwright-core only: PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD keeps npm from fetching a browser.
if [ ! -d "$HERE/node_modules/playwright-core" ]; then
  if ! PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix "$HERE" --silent --no-audit --no-fund >"$WORK/npm.log" 2>&1; then
    echo "run.sh: npm ci --prefix $HERE failed:" >&2
    cat "$WORK/npm.log" >&2
    exit 1
  fi
fi

# The server without a key: the page must ask for none.
mkdir -p "$WORK/open" "$WORK/keyed"
serve_tiny_chat "$KILN" "$TOKDIR" "$WORK/open" --set memory.kv_blocks=64 || exit 1
OPEN_PID=$SERVER_PID
OPEN_PORT=$PORT
# The server the panels are driven on, with a key only this script and the test know.
KEY=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
(umask 077 && printf '%s\n' "$KEY" >"$WORK/api-key")
serve_tiny_chat "$KILN" "$TOKDIR" "$WORK/keyed" --set memory.kv_blocks=512 --api-key-file "$WORK/api-key" || exit 1

mkdir -p "$SHOTS"
KILN_UI_URL="http://127.0.0.1:$PORT" KILN_OPEN_UI_URL="http://127.0.0.1:$OPEN_PORT" KILN_API_KEY="$KEY" \
  KILN_MODEL_ID="$MODEL_ID" KILN_CHROMIUM="$CHROMIUM" KILN_SCREENSHOTS=$(realpath "$SHOTS") \
  node --test --test-concurrency=1 "$HERE/dashboard.test.mjs"
STATUS=$?

for s in "keyed:$SERVER_PID" "open:$OPEN_PID"; do
  name=${s%%:*} pid=${s#*:}
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "run.sh: kiln serve ($name) died during the test:" >&2
    cat "$WORK/$name/server.err" >&2
    [ "$STATUS" -eq 0 ] && STATUS=1
  elif [ "$STATUS" -ne 0 ]; then
    echo "--- kiln serve ($name) stderr ---" >&2
    tail -50 "$WORK/$name/server.err" >&2
  fi
done
exit "$STATUS"
