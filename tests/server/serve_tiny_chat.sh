# Sourced by the scripts that drive a real `kiln serve` (openai_client/run.sh, soak/run.sh).
# serve_tiny_chat KILN TOKDIR WORK [kiln serve flags...]: creates the random-weight tiny-chat
# model with the Qwen3 tokenizer in WORK/model, starts `kiln serve` on a free port and sets
# SERVER_PID, PORT and MODEL_ID once it listens (returns 1, with the server's stderr, if it does
# not); with KILN_CHAT_TEMPLATE set, that file is the model's chat_template.jinja. stop_server:
# stops it (SIGTERM, then SIGKILL after 10 s). Server logs: WORK/server.err.
SERVER_PID=
PORT=
MODEL_ID=

serve_tiny_chat() {
  local kiln=$1 tokdir=$2 work=$3
  shift 3
  if ! "$kiln" model init --preset tiny-chat --out "$work/model" >"$work/init.log" 2>&1; then
    echo "kiln model init failed:" >&2
    cat "$work/init.log" >&2
    return 1
  fi
  cp "$tokdir/tokenizer.json" "$tokdir/tokenizer_config.json" "$work/model/"
  # KILN_CHAT_TEMPLATE: a template file served instead of tokenizer_config.json's.
  if [ -n "${KILN_CHAT_TEMPLATE:-}" ]; then cp "$KILN_CHAT_TEMPLATE" "$work/model/chat_template.jinja"; fi
  "$kiln" serve --model "$work/model" --port 0 --set server.state_dir="$work/state" "$@" \
    >"$work/server.out" 2>"$work/server.err" &
  SERVER_PID=$!
  # The server prints "kiln: serving '<id>' at http://127.0.0.1:PORT (...)" once it listens.
  local line
  for _ in $(seq 1 600); do
    line=$(grep -m1 "^kiln: serving '" "$work/server.err" 2>/dev/null || true)
    if [ -n "$line" ]; then
      PORT=$(sed -E 's/.* at http:\/\/[^:]+:([0-9]+).*/\1/' <<<"$line")
      MODEL_ID=$(sed -E "s/^kiln: serving '([^']*)'.*/\1/" <<<"$line")
      return 0
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "kiln serve exited before listening:" >&2
      cat "$work/server.err" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "kiln serve did not report its port within 60 s:" >&2
  cat "$work/server.err" >&2
  return 1
}

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 100); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
}
