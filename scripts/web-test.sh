#!/usr/bin/env bash
# The web calculator's test (issue 17): builds the WebAssembly page (scripts/web-build.sh), serves
# it with a static server and checks in Debian's headless Chromium (web/test/browser-test.mjs, via
# playwright-core from npm; `npm ci` is the only network use) that the page's DeepSeek-V3
# reference configuration (the README's first analyze command) gives the CLI's bytes for every
# stage and the peak. Needs build/release/moemem (the release build). Screenshot:
# build/web/screenshot.png.
set -euo pipefail
cd "$(dirname "$0")/.."
cli=build/release/moemem
[ -x "$cli" ] || { echo "web-test: $cli missing (build the release preset first)" >&2; exit 1; }
start=$SECONDS
./scripts/web-build.sh
built=$SECONDS
(cd web && npm ci --no-audit --no-fund --loglevel=error)
installed=$SECONDS

# The README's reference command, and a second configuration the page reads from its URL's hash.
ref=(--model deepseek-v3 --tp 2 --pp 16 --dp 32 --ep 8 --sp --distributed-optimizer --global-batch 1024
     --recompute selective --recompute-modules mla_up_proj,layernorm --gpu h800-80g)
other_hash="model=mixtral-8x7b&tp=2&pp=4&dp=8&ep=8&sp=1&recompute=full&zero=1&gpu=h100-80g"
other=(--model mixtral-8x7b --tp 2 --pp 4 --dp 8 --ep 8 --sp --recompute full --zero 1 --gpu h100-80g)
"$cli" analyze "${ref[@]}" --format json >build/web/cli-reference.json
"$cli" analyze "${other[@]}" --format json >build/web/cli-other.json
# The CLI's own HTML report of the reference configuration, opened in the same browser.
"$cli" analyze "${ref[@]}" --format html >build/web/site/report.html

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 -d build/web/site >build/web/server.log 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/index.html')" 2>/dev/null && break
  sleep 0.1
done

MOEMEM_SITE="http://127.0.0.1:$port/" MOEMEM_CLI_REF=build/web/cli-reference.json \
  MOEMEM_CLI_OTHER=build/web/cli-other.json MOEMEM_OTHER_HASH="$other_hash" MOEMEM_HTML_REPORT=report.html \
  MOEMEM_CONFIG=data/models/deepseek-v3.json \
  MOEMEM_SCREENSHOT="$PWD/build/web/screenshot.png" node web/test/browser-test.mjs
echo "web-test: wasm build $((built - start)) s, npm ci $((installed - built)) s, browser test $((SECONDS - installed)) s; screenshot build/web/screenshot.png"
