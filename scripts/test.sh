#!/usr/bin/env bash
# Installs dependencies (Debian packages), then builds and runs every test twice: an optimised
# build with warnings as errors, and a debug build under AddressSanitizer and
# UndefinedBehaviorSanitizer. Also checks the predictions against the public measurements
# (moemem validate, issue 7's thresholds) and builds the benchmarks and runs each once, briefly.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs=$(nproc)

echo "== release build (warnings are errors)"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

echo "== moemem validate: the public measurements (high confidence for now; see docs/validation.md)"
./build/release/moemem validate --min-confidence high --max-median-error 3 --max-error 15 --max-device-median-error 5 --min-mean-error -2

echo "== benchmarks build and run (smoke run, not a measurement)"
./build/release/bench/moemem_bench --benchmark_min_time=0.01 >/dev/null

echo "== sanitizer build (ASan + UBSan)"
cmake --preset sanitize >/dev/null
cmake --build --preset sanitize -j "$jobs"
ctest --preset sanitize -j "$jobs"
