#!/usr/bin/env bash
# The unit tests and the integration suite under AddressSanitizer +
# UndefinedBehaviorSanitizer (and LeakSanitizer at every exit). tests/run.sh
# calls this after ctest (FENCEGATE_SKIP_ASAN=1 skips it).
#
#   bash tests/asan.sh
#
# One clang build serves this stage and the fuzz stage (tests/fuzz/run.sh):
# FENCEGATE_FUZZ=ON compiles the whole tree with
# -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined,
# and with the tests on it holds the fencegate binary, the unit tests and
# the fuzz targets. Building it once costs less than a separate g++ ASan
# build plus the clang fuzz build (docs/development.md).
#
# Runs ctest in that build: every unit test, fuzz.replay.* (each fuzz
# target over its seed corpus) and the integration suite (pytest through the
# real fencegate binary). Left out: chaos.short.* (load and restarts that
# the g++ stage already runs; under ASan they would double),
# integration.kill_torture (half a minute of both cores; integration.crash
# SIGKILLs an instrumented fencegate under load already) and chaos.checker
# and chaos.fastbackend (pure Python, nothing to sanitize), docs.* (the
# documented commands: the integration suite covers what they drive),
# integration.packaging (it checks the release binary's shared libraries and
# the shipped files, not code), and the tests that mostly wait on other
# processes over paths the rest of the suite drives already:
# integration.etcd_cluster, integration.haproxy_recipe and
# integration.replica_failback (etcd elections, HAProxy's checks, a load
# through HAProxy; integration.etcd_replicas runs the etcd engine and its
# ownership of keys here),
# integration.gc_pause_demo and integration.demo (the demo scripts).
#
# Any report fails the stage. UBSan is fatal (-fno-sanitize-recover), ASan
# and LSan exit with exitcode=66, and every instrumented process -- the test
# binaries and each fencegate that pytest starts, including the ones whose
# stderr a test captures or that exit on SIGTERM with a leak -- writes its
# report to $BUILD/sanitizer-reports/report.<pid>. A fencegate killed with
# SIGKILL (crash tests) cannot report at exit; everything it did before is
# still checked as it happens. After ctest the stage fails if any report
# file exists, and prints them. There are no suppressions.
#
# Environment:
#   FENCEGATE_ASAN_BUILD_DIR  clang build directory (default: the fuzz stage's,
#                             $FENCEGATE_FUZZ_BUILD_DIR or build-fuzz/ at the repo root)
#   ASAN_BUILD_JOBS           parallel compile jobs (default 2)
#   ASAN_OPT                  optimisation, -O0 (default: builds in half the
#                             time of -O1, tests run a little slower) or -O1
#   ASAN_CTEST_ARGS           extra ctest arguments, e.g. "-R integration"
#   ASAN_CTEST_JOBS           tests ctest runs at once (default 3: the
#                             integration files wait on their processes, but
#                             instrumented fencegates use more CPU than the
#                             g++ stage's)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FENCEGATE_ASAN_BUILD_DIR:-${FENCEGATE_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}}"
REPORTS="$BUILD/sanitizer-reports"

start=$(date +%s)
(cd "$ROOT" && cmake --preset asan -B "$BUILD" -DFENCEGATE_SANITIZER_OPT="${ASAN_OPT:--O0}" >/dev/null)
cmake --build "$BUILD" -j "${ASAN_BUILD_JOBS:-2}"
built=$(date +%s)

rm -rf "$REPORTS"
mkdir -p "$REPORTS"
# World-writable like /tmp: one integration test runs fencegate as the
# unprivileged user nobody, and its report must land here too.
chmod 1777 "$REPORTS"
common="log_path=$REPORTS/report:print_stacktrace=1:symbolize=1"
export ASAN_OPTIONS="$common:exitcode=66:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="$common:halt_on_error=1"
export LSAN_OPTIONS="$common"

rc=0
# shellcheck disable=SC2086
ctest --test-dir "$BUILD" --output-on-failure --no-tests=error -j "${ASAN_CTEST_JOBS:-3}" \
  -E '^(chaos\.|docs\.|integration\.(kill_torture|packaging|etcd_cluster|haproxy_recipe|replica_failback|gc_pause_demo|demo)$)' \
  ${ASAN_CTEST_ARGS:-} || rc=$?
ran=$(date +%s)

mapfile -t reports < <(find "$REPORTS" -type f | sort)
for f in "${reports[@]}"; do
  echo "---- sanitizer report $f" >&2
  head -n 80 "$f" >&2
done
echo "asan: build $((built - start)) s, tests $((ran - built)) s," \
     "ctest exit $rc, sanitizer reports ${#reports[@]}"
if [[ $rc -ne 0 || ${#reports[@]} -gt 0 ]]; then
  echo "asan: FAILED" >&2
  exit 1
fi
echo "asan: OK, 0 reports"
