#!/usr/bin/env bash
# Installs dependencies (Debian packages), then builds and runs every test twice: an optimised
# build with warnings as errors (gcc), and a clang build at -O1 under AddressSanitizer and
# UndefinedBehaviorSanitizer that also holds the libFuzzer targets; then runs each of those for 30 s
# (scripts/fuzz.sh, which reuses the sanitizer build). Also checks the predictions against the
# public measurements (moemem validate, with ratchets at today's errors), builds the web calculator
# (WebAssembly) and checks it in headless Chromium, runs each benchmark once, briefly, and checks
# the hf profile against PyTorch autograd on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs=$(nproc)

echo "== release build (warnings are errors)"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

echo "== moemem validate: the public measurements (docs/validation.md; issue 12's targets are the defaults, not met yet)"
# Ratchets at what the model achieves today, so that no change makes it worse: all records with
# confidence medium and up (MoE and MLA runs included), and the high-confidence ones tighter.
./build/release/moemem validate --min-confidence medium --max-median-error 2.8 --max-error 25 \
  --max-device-median-error 10.5 --min-mean-error -2.5 >/dev/null
./build/release/moemem validate --min-confidence high --max-median-error 3 --max-error 12 \
  --max-device-median-error 14 --min-mean-error -1
# Training steps measured on one H200 with transformers (scripts/measure/hf_step_memory.py): a
# ratchet at today's errors (allocated median 0.1%, max 0.3%; with reserved, median 0.3%, max
# 12.8%: the allocator's cache on MoE runs is not modelled; device median 3.6%, mean -2.2%).
./build/release/moemem validate --set tests/data/validation/measured-device.jsonl --min-confidence high \
  --max-median-error 1 --max-error 13.5 --max-device-median-error 4 --min-mean-error -2.5 >/dev/null
# The step-time model against published throughput: issue 16's targets (median 15%, max 30%,
# validate's defaults) and a ratchet at today's errors (median 7.2%, max 17.6%).
./build/release/moemem validate --throughput >/dev/null
./build/release/moemem validate --throughput --max-median-error 8 --max-error 18 >/dev/null

echo "== web calculator: WebAssembly build, page against the CLI in headless Chromium (scripts/web-test.sh)"
./scripts/web-test.sh

echo "== benchmarks build and run (smoke run, not a measurement)"
./build/release/bench/moemem_bench --benchmark_min_time=0.01 >/dev/null

echo "== sanitizer build (clang -O1, ASan + UBSan, with the libFuzzer targets)"
cmake --preset sanitize >/dev/null
cmake --build --preset sanitize -j "$jobs"
ctest --preset sanitize -j "$jobs"

echo "== fuzzing (libFuzzer under ASan + UBSan, clang): each target ${MOEMEM_FUZZ_SECONDS:-30} s, seeded from tests/data"
./scripts/fuzz.sh

echo "== hf profile against PyTorch autograd (CPU, eager attention; tests/groundtruth/check_hf.py)"
timeout 120 /usr/bin/python3 tests/groundtruth/check_hf.py build/release/tests/moemem_layer_terms
