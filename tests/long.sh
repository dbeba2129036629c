#!/usr/bin/env bash
# The long suite: what CI's test command (tests/run.sh) leaves out because
# it takes hours, not minutes. Run it once a week, after an upgrade of the
# compilers, RocksDB, Boost or .clang-tidy, and before a release
# (docs/development.md, "The long suite"). Stages, in order:
#   tidy   clang-tidy over every source (tests/lint.sh tidy; CI reads only
#          the sources a change touches)
#   tsan   the concurrency tests under ThreadSanitizer, each binary 20 times
#          (TSAN_REPEAT=20 tests/tsan.sh; CI: once)
#   fuzz   every libFuzzer target for an hour (tests/fuzz/run.sh --long; CI:
#          5 s each)
#   chaos  every default chaos configuration for 3 hours (chaos/run --long;
#          CI: 45 s each), then replicas at volume (cluster-volume: at least
#          100 key moves and 100,000 acknowledged writes), against the
#          default build's binary
#
#   bash tests/long.sh                 # all four: about a day
#   bash tests/long.sh tidy tsan       # some of them
#
# Each stage's result and time are printed at the end; the suite fails if
# any stage failed (it goes on to the next one first).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FENCEGATE_BUILD_DIR:-$ROOT/build}"
stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(tidy tsan fuzz chaos)

bash "$ROOT/docker/install-deps.sh"

results=()
failed=0
for stage in "${stages[@]}"; do
  t0=$(date +%s)
  rc=0
  echo "==== long suite: $stage"
  case "$stage" in
    tidy) bash "$ROOT/tests/lint.sh" tidy || rc=$? ;;
    tsan) TSAN_REPEAT="${TSAN_REPEAT:-20}" bash "$ROOT/tests/tsan.sh" || rc=$? ;;
    fuzz) bash "$ROOT/tests/fuzz/run.sh" --long || rc=$? ;;
    chaos)
      { (cd "$ROOT" && cmake --preset default -B "$BUILD" >/dev/null) &&
        cmake --build "$BUILD" --target fencegate &&
        "$ROOT/chaos/run" --long --fencegate "$BUILD/app/fencegate" &&
        "$ROOT/chaos/run" --long --configs cluster-volume --fencegate "$BUILD/app/fencegate"; } ||
        rc=$?
      ;;
    *) echo "long suite: unknown stage $stage (tidy, tsan, fuzz or chaos)" >&2; exit 2 ;;
  esac
  [[ $rc -eq 0 ]] || failed=1
  results+=("$(printf '%-6s %6d s, %s' "$stage" $(( $(date +%s) - t0 )) \
    "$([[ $rc -eq 0 ]] && echo passed || echo "FAILED (exit $rc)")")")
done
echo "==== long suite:"
printf '  %s\n' "${results[@]}"
exit "$failed"
