#!/usr/bin/env bash
# Usage: run.sh KILN_BINARY
#
# Creates the tiny-chat model (random weights, Qwen3 tokenizer) in a temp dir, serves it on a free
# port with a random API key (--api-key-file, a file of mode 0600), and a second time with the
# Qwen3.5-form template tests/fixtures/templates/xml_tool_calls.jinja (XML tool calls), waits for
# /health, installs the pinned `openai` npm package when node_modules is missing, runs
# openai_client.test.mjs and structured_outputs.test.mjs against the servers with node:test (the
# key in KILN_API_KEY), stops the servers and exits with the node tests' status. Prints "SKIPPED: <reason>" and exits 0 only when node/npm are absent or
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
XML_PID=
cleanup() {
  stop_server
  if [ -n "$XML_PID" ]; then SERVER_PID=$XML_PID; stop_server; fi
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
mkdir -p "$WORK/xml"
KILN_CHAT_TEMPLATE="$ROOT/tests/fixtures/templates/xml_tool_calls.jinja" \
  serve_tiny_chat "$KILN" "$TOKDIR" "$WORK/xml" --set memory.kv_blocks=1024 --api-key-file "$WORK/api-key" || exit 1
XML_PID=$SERVER_PID XML_PORT=$PORT XML_MODEL_ID=$MODEL_ID
serve_tiny_chat "$KILN" "$TOKDIR" "$WORK" --set memory.kv_blocks=2048 --api-key-file "$WORK/api-key" || exit 1

# Wait for each server's /health to answer 200 with status "ready".
wait_ready() {
  node -e '
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
  })();' "http://127.0.0.1:$1/health"
}
for p in "$PORT:$WORK" "$XML_PORT:$WORK/xml"; do
  if ! wait_ready "${p%%:*}"; then
    echo "run.sh: /health did not become ready within 60 s:" >&2
    cat "${p#*:}/server.err" >&2
    exit 1
  fi
done

# 64 json_schema requests by default (about 20 s on two cores); KILN_STRUCTURED_REQUESTS=200 for the
# full count.
KILN_STRUCTURED_REQUESTS=${KILN_STRUCTURED_REQUESTS:-64} \
KILN_BASE_URL="http://127.0.0.1:$PORT/v1" KILN_MODEL_ID="$MODEL_ID" KILN_API_KEY="$KEY" \
  KILN_XML_BASE_URL="http://127.0.0.1:$XML_PORT/v1" KILN_XML_MODEL_ID="$XML_MODEL_ID" \
  node --test "$HERE/openai_client.test.mjs" "$HERE/structured_outputs.test.mjs"
STATUS=$?

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
  echo "run.sh: kiln serve died during the test:" >&2
  cat "$WORK/server.err" >&2
  [ "$STATUS" -eq 0 ] && STATUS=1
fi
if ! kill -0 "$XML_PID" 2>/dev/null; then
  echo "run.sh: kiln serve (XML template) died during the test:" >&2
  cat "$WORK/xml/server.err" >&2
  [ "$STATUS" -eq 0 ] && STATUS=1
fi
if [ "$STATUS" -ne 0 ]; then
  echo "--- kiln serve stderr ---" >&2
  tail -50 "$WORK/server.err" >&2
fi
exit "$STATUS"
