#!/usr/bin/env bash
# Installs dependencies (Debian packages), builds moemem and runs the main job: the DeepSeek-V3
# reference analysis as tables. Extra arguments go to `moemem paper` (e.g. --format markdown).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target moemem_exe >/dev/null
exec ./build/release/moemem paper "$@"
