#!/usr/bin/env bash
# Builds the libFuzzer targets (part of the sanitize preset: clang, ASan + UBSan) and runs each for a bounded
# time (MOEMEM_FUZZ_SECONDS, default 30), seeded from tests/data (fuzz/CMakeLists.txt names the
# seed directories of each target). A crash, sanitizer report, leak, timeout (10 s per input) or
# out-of-memory (2 GB) fails the run; the input is left in build/sanitize/fuzz/artifacts/<target>/:
# fix the bug and keep the input in tests/data/fuzz/<target>/ as a regression case.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${MOEMEM_FUZZ_SECONDS:-30}
jobs=$(nproc)

cmake --preset sanitize >/dev/null
cmake --build --preset sanitize -j "$jobs"
dir=build/sanitize/fuzz

# validation_line's seeds: the public measurement set, one record per file.
rm -rf "$dir/seeds/validation_line"
mkdir -p "$dir/seeds/validation_line"
split -l 1 -d -a 3 tests/data/validation/measured-public.jsonl "$dir/seeds/validation_line/record-"

status=0
for seeds_file in "$dir"/fuzz_*.seeds; do
  exe=${seeds_file%.seeds}
  name=${exe##*/fuzz_}
  corpus="$dir/corpus/$name" artifacts="$dir/artifacts/$name/"
  mkdir -p "$corpus" "$artifacts"
  mapfile -t seeds <"$seeds_file"
  echo "fuzz_$name: ${seconds} s"
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts" "$corpus" "${seeds[@]}" >"$dir/$name.log" 2>&1; then
    echo "fuzz_$name FAILED: the input is in $artifacts; its log is $dir/$name.log:" >&2
    grep -E -A30 'ERROR|runtime error|deadly signal|Test unit written' "$dir/$name.log" | head -60 >&2
    status=1
  else
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$dir/$name.log" | tr '\n' ' '
    echo
  fi
done
exit "$status"
