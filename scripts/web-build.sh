#!/usr/bin/env bash
# Builds the web calculator's WebAssembly (web/CMakeLists.txt) with Debian's emscripten into
# build/web/: moemem.js + moemem.wasm, with web/'s page beside them (build/web/site/), ready for
# any static file server: `python3 -m http.server -d build/web/site`.
# Debian's emscripten ships its system libraries prebuilt (a frozen cache), so the first build
# compiles moemem's sources only. MOEMEM_WEB_JOBS sets the parallel compiles (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v emcmake >/dev/null || { echo "web-build: emscripten missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
out=build/web
# Debian's emscripten runs its JS optimizer with the acorn module from node-acorn (/usr/share/nodejs),
# which a Node.js from elsewhere (NodeSource's) does not search by itself.
export NODE_PATH="${NODE_PATH:+$NODE_PATH:}/usr/share/nodejs"
if [ ! -f "$out/build.ninja" ]; then
  emcmake cmake -S web -B "$out" -G Ninja >/dev/null
fi
cmake --build "$out" -j "${MOEMEM_WEB_JOBS:-$(nproc)}"
site="$out/site"
mkdir -p "$site"
cp web/index.html web/app.js web/chart.js "$out/moemem.js" "$out/moemem.wasm" "$site/"
echo "web-build: $site (serve it: python3 -m http.server -d $site)"
