#!/usr/bin/env bash
# Builds fencegate and runs every test (unit tests and the integration
# suite) through ctest, then the sanitizer and fuzz stages. This is what CI
# runs (.ci/run). Stages, in order, each timed in the log's last lines:
#   lint   process words, layers and cppcheck (tests/lint.sh): a few seconds
#   build  the g++ build of everything (RelWithDebInfo with -g1: line tables)
#   ctest  unit tests, integration suite, chaos.short.*, docs
#   tidy   clang-tidy over the sources the change touches (tests/lint.sh
#          tidy-change; FENCEGATE_TIDY=full: every source), then the tsan
#          stage's build (its time counts in tidy's): beside ctest at the
#          lowest CPU priority (ctest mostly waits on the processes it
#          starts, and these take the core it leaves), then beside the asan
#          stage at the same priority as it (no core idles while either
#          has work)
#   asan   unit tests and integration suite under ASan+UBSan, in a clang
#          build that the fuzz stage reuses (tests/asan.sh)
#   tsan   the concurrency tests under ThreadSanitizer (tests/tsan.sh),
#          once its build beside is done
#   fuzz   the libFuzzer targets, 5 s each, two at a time (tests/fuzz/run.sh)
#
#   bash tests/run.sh
#
# Environment:
#   BUILD_TYPE           CMake build type (default RelWithDebInfo)
#   FENCEGATE_BUILD_DIR  build directory (default build/ at the repo root)
#   FENCEGATE_SANITIZE   "", "address" or "thread" (sanitizer build)
#   CTEST_ARGS           extra ctest arguments, e.g. "-R integration"
#   CTEST_JOBS           tests ctest runs at once (default 4)
#   FENCEGATE_SKIP_LINT  1: skip the static analysis stages (tests/lint.sh)
#   FENCEGATE_TIDY       change (default): clang-tidy over the sources the
#                        change touches; full: over every source
#   FENCEGATE_TIDY_BASE  the commit the change starts from (tests/lint_changed.py)
#   FENCEGATE_SKIP_TSAN  1: skip the ThreadSanitizer stage (tests/tsan.sh)
#   FENCEGATE_SKIP_ASAN  1: skip the ASan+UBSan stage (tests/asan.sh)
#   FENCEGATE_SKIP_FUZZ  1: skip the fuzz stage (tests/fuzz/run.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FENCEGATE_BUILD_DIR:-$ROOT/build}"

times=()
TICKS=$(getconf CLK_TCK)
STAGES="$(mktemp -d)"
trap 'rm -rf "$STAGES"' EXIT
started=$(date +%s)
# cpu_now: sets $cpu to the CPU seconds (user + system) of the calling
# shell's finished children. Called directly, not in $(...): a command
# substitution is a shell of its own, with children of its own.
cpu_now() {
  local st
  read -r -a st <"/proc/$BASHPID/stat"  # fields 16 and 17: cutime, cstime
  cpu=$(( (st[15] + st[16]) / TICKS ))
}
# stage_body NAME COMMAND...: runs the command (in a subshell of its own, so
# that its CPU time is its own), writes NAME's time line to $STAGES/NAME.time.
stage_body() {
  local name="$1" t0 c0 cpu rc=0
  shift
  t0=$(date +%s)
  cpu_now
  c0=$cpu
  "$@" || rc=$?
  cpu_now
  printf '%-6s %4d s wall, %5d s CPU%s\n' "$name" $(( $(date +%s) - t0 )) \
    $(( cpu - c0 )) "$([[ $rc -eq 0 ]] || echo ", FAILED (exit $rc)")" \
    >"$STAGES/$name.time"
  return "$rc"
}
stage_done() {  # stage_done NAME RC: records NAME's time; stops the run if it failed
  times+=("$(cat "$STAGES/$1.time")")
  if [[ $2 -ne 0 ]]; then
    [[ -z "$beside_pid" ]] || wait "$beside_pid" 2>/dev/null || true
    print_times
    exit "$2"
  fi
}
stage() {  # stage NAME COMMAND...: runs it in the foreground
  local rc=0
  echo "==== stage $1"
  (stage_body "$@") || rc=$?
  stage_done "$1" "$rc"
}
# stage_beside NAME COMMAND...: starts a stage in the background at the
# lowest CPU priority (nice 19), its output in a file; stage_join NAME waits
# for it and prints that output. For a CPU-bound stage beside one that leaves
# a core idle: the foreground stage's processes get the CPU whenever they
# want it, so its timing is what it would be alone.
beside_pid=
stage_beside() {
  echo "==== stage $1 (beside the next stage, nice 19; its output follows when it ends)"
  # renice, not nice: the command may be a function of this script.
  (renice -n 19 -p "$BASHPID" >/dev/null && stage_body "$@") >"$STAGES/$1.log" 2>&1 &
  beside_pid=$!
}
# beside_unnice: the stage beside, and everything it started, back at the
# default priority (root only: others may not lower a nice value; it then
# keeps the leftover core).
beside_unnice() {
  local pids=("$beside_pid") i=0 child
  while [[ $i -lt ${#pids[@]} ]]; do
    # shellcheck disable=SC2013  # the files hold PIDs separated by spaces: words
    for child in $(cat "/proc/${pids[$i]}/task/"*/children 2>/dev/null); do pids+=("$child"); done
    i=$((i + 1))
  done
  renice -n 0 -p "${pids[@]}" >/dev/null 2>&1 || true
}
stage_join() {
  local rc=0
  wait "$beside_pid" || rc=$?
  beside_pid=
  echo "==== stage $1 (output)"
  cat "$STAGES/$1.log"
  stage_done "$1" "$rc"
}
print_times() {
  echo "==== stage times:"
  printf '  %s\n' "${times[@]}"
  echo "  total  $(( $(date +%s) - started )) s wall"
}

bash "$ROOT/docker/install-deps.sh"

# The quick static checks first: they need no build and fail in seconds.
if [[ "${FENCEGATE_SKIP_LINT:-0}" != 1 ]]; then
  stage lint bash "$ROOT/tests/lint.sh" words layers cppcheck
fi

# The fuzz targets' seed replays (fuzz.replay.*) run in the ASan stage's
# clang build; this build compiles them only when that stage is skipped.
replay=OFF
[[ "${FENCEGATE_SKIP_ASAN:-0}" != 1 ]] || replay=ON
build() {  # (set -e does not apply inside `stage`: hence the &&)
  (cd "$ROOT" && cmake --preset default -B "$BUILD" \
    -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
    -DFENCEGATE_SANITIZE="${FENCEGATE_SANITIZE:-}" -DFENCEGATE_FUZZ_REPLAY="$replay") &&
    cmake --build "$BUILD"
}
stage build build

# --no-tests=error: a build that registered no test is a failure, not a pass.
# -j 4: each integration file and each chaos.short configuration is its own
# ctest entry, and most of their time is spent waiting on the processes they
# start (the stage uses about one core of two), so four run side by side.
# clang-tidy (minutes of CPU, no build needed) fills the core ctest leaves.
# Then, on that core, the tsan stage's build: the stage itself then only
# runs the tests (a failed build here is built, and fails, there again).
beside() {
  local rc=0
  if [[ "${FENCEGATE_SKIP_LINT:-0}" != 1 ]]; then
    case "${FENCEGATE_TIDY:-change}" in
      change) bash "$ROOT/tests/lint.sh" tidy-change || rc=$? ;;
      full) bash "$ROOT/tests/lint.sh" tidy || rc=$? ;;
      *) echo "FENCEGATE_TIDY is change or full, not ${FENCEGATE_TIDY}" >&2; return 2 ;;
    esac
  fi
  if [[ "${FENCEGATE_SKIP_TSAN:-0}" != 1 ]]; then
    if TSAN_BUILD_ONLY=1 bash "$ROOT/tests/tsan.sh" >"$STAGES/tsan-build.log" 2>&1; then
      tail -n 1 "$STAGES/tsan-build.log"
    else
      echo "the tsan build beside ctest failed: the tsan stage builds again"
    fi
  fi
  return "$rc"
}
if [[ "${FENCEGATE_SKIP_LINT:-0}" != 1 || "${FENCEGATE_SKIP_TSAN:-0}" != 1 ]]; then
  stage_beside tidy beside
fi
# shellcheck disable=SC2086
stage ctest ctest --test-dir "$BUILD" --output-on-failure --no-tests=error \
  -j "${CTEST_JOBS:-4}" ${CTEST_ARGS:-}
# What is left beside now shares the cores with the asan stage as an equal.
[[ -z "$beside_pid" ]] || beside_unnice

# The unit tests and the integration suite under ASan+UBSan, in the clang
# build that the fuzz stage then reuses (tests/asan.sh).
if [[ "${FENCEGATE_SKIP_ASAN:-0}" != 1 ]]; then
  stage asan bash "$ROOT/tests/asan.sh"
fi
[[ -z "$beside_pid" ]] || stage_join tidy

# The concurrency tests under ThreadSanitizer (tests/tsan.sh), built beside.
if [[ "${FENCEGATE_SKIP_TSAN:-0}" != 1 ]]; then
  stage tsan bash "$ROOT/tests/tsan.sh"
fi

# The fuzz stage: the libFuzzer targets of that clang build, a smoke run of
# 5 s each (tests/fuzz/run.sh alone: 15 s; --long: an hour). Their seeds
# are replayed in the ASan stage (fuzz.replay.*).
if [[ "${FENCEGATE_SKIP_FUZZ:-0}" != 1 ]]; then
  FUZZ_SECONDS="${FUZZ_SECONDS:-5}" stage fuzz bash "$ROOT/tests/fuzz/run.sh"
fi
print_times
