#!/usr/bin/env bash
# Installs moemem's build and test dependencies from Debian's packages (apt only).
# Safe to run repeatedly: it skips apt entirely when everything is already present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build
  nlohmann-json3-dev libcli11-dev libfmt-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  clang libclang-rt-dev  # libFuzzer and clang's sanitizer runtimes (scripts/fuzz.sh)
  python3-torch  # CPU PyTorch: the hf profile's autograd ground truth (tests/groundtruth/check_hf.py)
  python3 python3-dev pybind11-dev  # the Python module (python/, target moemem_python) and its tests
  emscripten chromium  # the web calculator (web/): its WebAssembly build and browser test (scripts/web-test.sh)
)
# npm installs the browser test's driver (web/package-lock.json); a Node.js from elsewhere
# (NodeSource's) brings its own, and Debian's npm package would conflict with it.
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
