#!/usr/bin/env bash
# Builds fencegate and runs every test (unit tests and the integration
# suite) through ctest. This is what CI runs (.ci/run).
#
#   bash tests/run.sh
#
# Environment:
#   BUILD_TYPE           CMake build type (default RelWithDebInfo)
#   FENCEGATE_BUILD_DIR  build directory (default build/ at the repo root)
#   FENCEGATE_SANITIZE   "", "address" or "thread" (sanitizer build)
#   CTEST_ARGS           extra ctest arguments, e.g. "-R integration"
#   FENCEGATE_SKIP_TSAN  1: skip the ThreadSanitizer stage (tests/tsan.sh) after ctest
#   FENCEGATE_SKIP_FUZZ  1: skip the fuzz stage (tests/fuzz/run.sh) after ctest
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FENCEGATE_BUILD_DIR:-$ROOT/build}"

bash "$ROOT/docker/install-deps.sh"

cmake -S "$ROOT" -B "$BUILD" -G Ninja \
  -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DFENCEGATE_SANITIZE="${FENCEGATE_SANITIZE:-}"
cmake --build "$BUILD"

# --no-tests=error: a build that registered no test is a failure, not a pass.
# shellcheck disable=SC2086
ctest --test-dir "$BUILD" --output-on-failure --no-tests=error ${CTEST_ARGS:-}

# The concurrency tests under ThreadSanitizer (tests/tsan.sh).
if [[ "${FENCEGATE_SKIP_TSAN:-0}" != 1 ]]; then
  bash "$ROOT/tests/tsan.sh"
fi

# The fuzz stage: a clang build of the libFuzzer targets, 20 s each.
if [[ "${FENCEGATE_SKIP_FUZZ:-0}" != 1 ]]; then
  bash "$ROOT/tests/fuzz/run.sh"
fi
