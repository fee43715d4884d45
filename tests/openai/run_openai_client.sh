#!/usr/bin/env bash
# Runs the npm `openai` 6.x client (tests/openai/openai_client.mjs) against a Cascade
# started here: `cascade serve` with two in-process workers on the bundled model, the
# HTTP API on a free port, an API key, and --chat-template chatml (the bundled model is a
# base model without a chat template).
#
#   tests/openai/run_openai_client.sh BIN_DIR [CACHE_DIR]
#
# CACHE_DIR: where npm installs the client (default: tests/openai), from the committed
# lockfile (npm ci), once per lockfile. Needs Node.js >= 20 and npm (the registry, on the
# first run only); without them the test is skipped (exit 77), except when CI is set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$(cd "${1:?usage: run_openai_client.sh BIN_DIR [CACHE_DIR]}" && pwd)
cache=${2:-$here}

in_ci() { [[ -n ${CI:-} && ${CI} != false && ${CI} != 0 ]]; }
unavailable() {
  if in_ci; then
    echo "openai_client: FAILED: $1 (CI is set: this check may not be skipped there)" >&2
    exit 1
  fi
  echo "openai_client: SKIPPED: $1"
  exit 77
}
command -v node >/dev/null || unavailable "node is not installed (needs Node.js >= 20)"
(($(node -p 'process.versions.node.split(".")[0]') >= 20)) || unavailable "Node.js $(node --version) is too old"
command -v npm >/dev/null || unavailable "npm is not installed"

mkdir -p "$cache"
if [[ $(cd "$cache" && pwd) != "$here" ]]; then
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
fi
stamp=$cache/node_modules/.cascade-openai-lock
if ! cmp -s "$here/package-lock.json" "$stamp"; then
  echo "openai_client: npm ci in $cache"
  (cd "$cache" && npm ci --no-audit --no-fund --loglevel=error) ||
    unavailable "npm ci failed in $cache (is the npm registry reachable?)"
  cp "$here/package-lock.json" "$stamp"
fi
cp "$here/openai_client.mjs" "$cache/"

work=$(mktemp -d)
server=
cleanup() {
  if [[ -n $server ]] && kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(free_port)
key=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$key" > "$work/api-key"
chmod 600 "$work/api-key"
"$bin/cascade" serve --model "$root/models/stories260K.gguf" --workers 2 --threads 1 \
  --listen "127.0.0.1:$(free_port)" --control-listen "127.0.0.1:$(free_port)" \
  --http-listen "127.0.0.1:$http" --api-key-file "$work/api-key" --chat-template chatml \
  > "$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 600); do
  if python3 - "$http" <<'PY' 2>/dev/null; then break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2)
PY
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log"; echo "openai_client: cascade serve exited" >&2; exit 1; }
  sleep 0.2
done
if ! (cd "$cache" && timeout 300 node openai_client.mjs "http://127.0.0.1:$http/v1" "$key"); then
  echo "--- cascade serve log ---"
  tail -50 "$work/serve.log"
  exit 1
fi
