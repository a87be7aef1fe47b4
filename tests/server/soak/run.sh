#!/usr/bin/env bash
# Usage: run.sh KILN_BINARY [SECONDS] [CLIENTS]     (defaults: 60 s, 64 clients)
#
# Serves the tiny-chat model (random weights, Qwen3 tokenizer) from a temp dir on a free port and
# runs soak.mjs against it: CLIENTS clients loop streaming chat requests for SECONDS, then the
# engine must be idle with every K/V block and GDN slot back, and the server's RSS must not have
# grown past warm-up. Prints soak.mjs's JSON summary; exits with its status.
set -uo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 KILN_BINARY [SECONDS] [CLIENTS]" >&2
  exit 2
fi
KILN=$(realpath "$1")
SECONDS_TO_RUN=${2:-60}
CLIENTS=${3:-64}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)

if [ ! -x "$KILN" ]; then
  echo "run.sh: $KILN is not an executable" >&2
  exit 2
fi
if ! command -v node >/dev/null 2>&1; then
  echo "run.sh: node (>= 18, for fetch) is needed" >&2
  exit 2
fi
TOKDIR=${KILN_TOKENIZER_DIR:-$ROOT/.cache/tokenizers/qwen3}
if [ ! -f "$TOKDIR/tokenizer.json" ] && [ -z "${KILN_TOKENIZER_DIR:-}" ]; then
  "$ROOT/scripts/fetch-tokenizer" || true
fi
if [ ! -f "$TOKDIR/tokenizer.json" ] || [ ! -f "$TOKDIR/tokenizer_config.json" ]; then
  echo "run.sh: the Qwen3 tokenizer is not in $TOKDIR (scripts/fetch-tokenizer fetches it)" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-soak.XXXXXX")
source "$HERE/../serve_tiny_chat.sh"
cleanup() {
  stop_server
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

serve_tiny_chat "$KILN" "$TOKDIR" "$WORK" --set server.max_decode_batch=64 --set memory.kv_blocks=2048 \
  --set server.max_queued_requests=256 || exit 1

node "$HERE/soak.mjs" --url "http://127.0.0.1:$PORT" --pid "$SERVER_PID" \
  --seconds "$SECONDS_TO_RUN" --clients "$CLIENTS" --model "$MODEL_ID"
STATUS=$?

if [ "$STATUS" -ne 0 ]; then
  echo "--- kiln serve stderr (last 50 lines) ---" >&2
  tail -50 "$WORK/server.err" >&2
fi
exit "$STATUS"
