#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and
# runs each one on a copy of its seed corpus. tests/run.sh calls this after
# ctest (FENCEGATE_SKIP_FUZZ=1 skips it).
#
#   bash tests/fuzz/run.sh                  # every target, FUZZ_SECONDS each (default 15)
#   bash tests/fuzz/run.sh --long           # every target, one hour each
#   bash tests/fuzz/run.sh request token    # some targets (names as in corpus/)
#
# Prints one summary line per target (executions, crashes) and exits 1 when
# any target crashed, leaked, timed out or a sanitizer reported an error.
# The repository's corpus is never written to: new inputs stay in a
# temporary copy, and failing inputs are kept under
# $FENCEGATE_FUZZ_BUILD_DIR/findings/<target>/ with the command that replays them.
#
# Environment:
#   FUZZ_SECONDS              seconds per target (default 15; --long: 3600)
#   FENCEGATE_FUZZ_BUILD_DIR  clang build directory (default build-fuzz/ at the repo root)
#   FUZZ_BUILD_JOBS           parallel compile jobs (default 2)
#   FUZZ_JOBS                 targets fuzzed at once (default 2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/tests/fuzz"
BUILD="${FENCEGATE_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-15}"
JOBS="${FUZZ_JOBS:-2}"
ALL_TARGETS=(request canonical_path token config lock_request admin_request upstream_response
  fence_ops idempotency_record)

TARGETS=()
for arg in "$@"; do
  case "$arg" in
    --long) SECONDS_PER_TARGET="${FUZZ_SECONDS:-3600}" ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "fuzz: unknown option $arg" >&2; exit 2 ;;
    *)
      if [[ ! -d "$HERE/corpus/$arg" ]]; then
        echo "fuzz: unknown target $arg (one of: ${ALL_TARGETS[*]})" >&2
        exit 2
      fi
      TARGETS+=("$arg") ;;
  esac
done
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=("${ALL_TARGETS[@]}")

# Inputs larger than the limits the targets configure (4 KiB heads, 2 KiB
# bodies) are needed to reach the 431/413 paths.
max_len() {
  case "$1" in
    token) echo 256 ;;
    canonical_path) echo 4096 ;;
    fence_ops) echo 512 ;;
    *) echo 8192 ;;
  esac
}

started=$(date +%s)
# A fresh build directory gets only the fuzz targets. One that tests/asan.sh
# configured keeps its tests: the ASan stage and this one share that build,
# and tests/run.sh runs them in that order, so here nothing is left to build.
# The ASan stage compiles that build at -O0 (it builds in half the time);
# a fresh build and an hour-long run fuzz at -O1, which runs faster.
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  (cd "$ROOT" && cmake --preset fuzz -B "$BUILD" >/dev/null)
elif [[ "$SECONDS_PER_TARGET" -ge 600 ]]; then
  cmake -S "$ROOT" -B "$BUILD" -DFENCEGATE_SANITIZER_OPT=-O1 >/dev/null
fi
build_targets=()
for t in "${TARGETS[@]}"; do build_targets+=("fuzz_$t"); done
cmake --build "$BUILD" -j "${FUZZ_BUILD_JOBS:-2}" --target "${build_targets[@]}"
built=$(date +%s)

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# fuzz_one T: fuzzes target T; its report goes to $WORK/T/out, its
# summary line to $WORK/T/summary, and $WORK/T/failed marks a failure.
fuzz_one() {
  local t="$1"
  local bin="$BUILD/tests/fuzz/fuzz_$t"
  local corpus="$WORK/$t/corpus"
  local artifacts="$WORK/$t/artifacts"
  local log="$BUILD/fuzz-$t.log"
  local seeds runs crashes reports inputs line findings rc=0
  local dict=()
  mkdir -p "$corpus" "$artifacts"
  cp -R "$HERE/corpus/$t/." "$corpus/"
  seeds=$(find "$corpus" -type f | wc -l)
  [[ -f "$HERE/$t.dict" ]] && dict=("-dict=$HERE/$t.dict")

  "$bin" "$corpus" "${dict[@]}" \
    -max_total_time="$SECONDS_PER_TARGET" -max_len="$(max_len "$t")" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    >"$log" 2>&1 || rc=$?

  # Executions: libFuzzer's "Done N runs", else its final stats, else the
  # last "#N" status line (a crash stops it before "Done").
  runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -1)
  [[ -n "$runs" ]] ||
    runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  [[ -n "$runs" ]] || runs=$(sed -n 's/^#\([0-9][0-9]*\)[[:space:]].*/\1/p' "$log" | tail -1)
  [[ -n "$runs" ]] || runs=0
  crashes=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | wc -l)
  local report_re='ERROR: (Address|Leak|UndefinedBehavior)Sanitizer|ERROR: libFuzzer|runtime error:'
  reports=$(grep -cE "$report_re|invariant failed" "$log" || true)
  inputs=$(find "$corpus" -type f | wc -l)
  line="fuzz_$t: $runs runs in ${SECONDS_PER_TARGET}s, corpus $seeds -> $inputs inputs,"
  line="$line crashes $crashes"
  {
    echo "fuzz: fuzz_$t for ${SECONDS_PER_TARGET}s (log: $log)"
    if [[ $rc -ne 0 || $crashes -gt 0 || $reports -gt 0 ]]; then
      line="$line, sanitizer reports $reports, exit $rc: FAILED"
      touch "$WORK/$t/failed"
      findings="$BUILD/findings/$t"
      rm -rf "$findings"
      mkdir -p "$findings"
      cp -R "$artifacts/." "$findings/" 2>/dev/null || true
      echo "---- last lines of $log"
      tail -n 60 "$log"
      echo "---- failing inputs kept in $findings; replay one with:"
      echo "     $bin $findings/<file>"
    fi
    echo "$line"
  } >"$WORK/$t/out"
  echo "$line" >"$WORK/$t/summary"
}

# FUZZ_JOBS targets at a time (each libFuzzer process is one busy thread);
# the reports are printed in target order once all have finished.
running=0
for t in "${TARGETS[@]}"; do
  if [[ $running -ge $JOBS ]]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait || true

failed=()
summaries=()
for t in "${TARGETS[@]}"; do
  if [[ ! -f "$WORK/$t/summary" ]]; then
    echo "fuzz: fuzz_$t left no summary (the runner itself failed)"
    failed+=("$t")
    continue
  fi
  cat "$WORK/$t/out"
  summaries+=("$(cat "$WORK/$t/summary")")
  [[ ! -f "$WORK/$t/failed" ]] || failed+=("$t")
done

finished=$(date +%s)
echo
echo "fuzz summary (build $((built - started))s, runs $((finished - built))s):"
printf '  %s\n' "${summaries[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz: OK"
