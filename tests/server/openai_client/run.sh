#!/usr/bin/env bash
# Usage: run.sh KILN_BINARY
#
# Creates the tiny-chat model (random weights, Qwen3 tokenizer) in a temp dir, serves it on a free
# port with a random API key (--api-key-file, a file of mode 0600), waits for /health, installs
# the pinned `openai` npm package when node_modules is missing, runs openai_client.test.mjs against
# the server with node:test (the key in KILN_API_KEY), stops the server and exits with the node
# test's status. Prints "SKIPPED: <reason>" and exits 0 only when node/npm are absent or
# the Qwen3 tokenizer is missing and cannot be fetched.
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 KILN_BINARY" >&2
  exit 2
fi
KILN=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)

if [ ! -x "$KILN" ]; then
  echo "run.sh: $KILN is not an executable" >&2
  exit 2
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "SKIPPED: node and npm are needed for the openai client test (not found in PATH)"
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

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-openai-client.XXXXXX")
source "$HERE/../serve_tiny_chat.sh"
cleanup() {
  stop_server
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Install the pinned client first (it may take a while) so the server's start is not timed with it.
if [ ! -d "$HERE/node_modules/openai" ]; then
  if ! npm ci --prefix "$HERE" --silent --no-audit --no-fund >"$WORK/npm.log" 2>&1; then
    echo "run.sh: npm ci --prefix $HERE failed:" >&2
    cat "$WORK/npm.log" >&2
    exit 1
  fi
fi

KEY=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
(umask 077 && printf '%s\n' "$KEY" >"$WORK/api-key")
serve_tiny_chat "$KILN" "$TOKDIR" "$WORK" --set memory.kv_blocks=2048 --api-key-file "$WORK/api-key" || exit 1

# Wait for /health to answer 200 with status "ready".
if ! node -e '
  const url = process.argv[1];
  const deadline = Date.now() + 60000;
  (async () => {
    while (Date.now() < deadline) {
      try {
        const r = await fetch(url);
        if (r.ok && (await r.json()).status === "ready") process.exit(0);
      } catch {}
      await new Promise((res) => setTimeout(res, 100));
    }
    process.exit(1);
  })();' "http://127.0.0.1:$PORT/health"; then
  echo "run.sh: /health did not become ready within 60 s:" >&2
  cat "$WORK/server.err" >&2
  exit 1
fi

KILN_BASE_URL="http://127.0.0.1:$PORT/v1" KILN_MODEL_ID="$MODEL_ID" KILN_API_KEY="$KEY" \
  node --test "$HERE/openai_client.test.mjs"
STATUS=$?

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
  echo "run.sh: kiln serve died during the test:" >&2
  cat "$WORK/server.err" >&2
  [ "$STATUS" -eq 0 ] && STATUS=1
fi
if [ "$STATUS" -ne 0 ]; then
  echo "--- kiln serve stderr ---" >&2
  tail -50 "$WORK/server.err" >&2
fi
exit "$STATUS"
