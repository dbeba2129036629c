#!/usr/bin/env bash
# The concurrency tests under ThreadSanitizer: the token store (group
# commit, reader thread, reopen), the per-key queue and the fence filter
# (fence_tests), the per-client limit (net_tests), and the lock service
# (locks_tests), the etcd engine and its client against real etcd
# (etcd_tests). These link the layers below the proxy only (fencegate_fence,
# fencegate_net, fencegate_locks), so the proxy's and the admin listener's
# sessions are not compiled here. tests/run.sh calls this after ctest
# (FENCEGATE_SKIP_TSAN=1 skips it).
#
#   bash tests/tsan.sh            # build (TSan, only these targets) and run once
#   TSAN_REPEAT=20 bash tests/tsan.sh
#
# Any ThreadSanitizer report fails it (halt_on_error). tests/tsan.supp holds
# the suppressions, three, for false reports inside RocksDB's own memtable,
# arena and table-file set (Debian's library is not built with TSan); the
# file says why.
#
# Environment:
#   FENCEGATE_TSAN_BUILD_DIR  build directory (default build-tsan/ at the repo root)
#   TSAN_REPEAT               --gtest_repeat for each binary (default 1)
#   TSAN_BUILD_ONLY           1: build the targets and stop (tests/run.sh builds
#                             them beside ctest, on the core ctest leaves)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FENCEGATE_TSAN_BUILD_DIR:-$ROOT/build-tsan}"
TARGETS=(storage_tests fence_tests net_tests locks_tests etcd_tests)

start=$(date +%s)
(cd "$ROOT" && cmake --preset tsan -B "$BUILD" >/dev/null)
cmake --build "$BUILD" --target "${TARGETS[@]}"
built=$(date +%s)
if [[ "${TSAN_BUILD_ONLY:-0}" == 1 ]]; then
  echo "tsan: built in $((built - start)) s"
  exit 0
fi

failed=0
for t in "${TARGETS[@]}"; do
  bin="$(find "$BUILD/tests" -type f -name "$t" -perm -u+x | head -n 1)"
  if [[ -z "$bin" ]]; then
    echo "tsan: $t was not built" >&2
    failed=1
    continue
  fi
  log="$BUILD/$t.tsan.log"
  # The records compactor's test runs RocksDB's CompactRange beside writes
  # every 100 ms: the compactor thread then switches memtables and hands
  # RocksDB's write queue over, all ordered by atomics in Debian's
  # uninstrumented RocksDB, and TSan reports those hand-overs (at several
  # places inside RocksDB) as races. The test runs in ctest and under ASan.
  filter="*"
  [[ "$t" != storage_tests ]] || filter="-*ExpiredRecordsOfGrowingKeysLeaveTheDisk*"
  if TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$ROOT/tests/tsan.supp" \
     "$bin" --gtest_brief=1 --gtest_filter="$filter" --gtest_repeat="${TSAN_REPEAT:-1}" >"$log" 2>&1; then
    echo "tsan: $t passed, 0 reports"
  else
    echo "tsan: $t FAILED (see $log):" >&2
    tail -n 60 "$log" >&2
    failed=1
  fi
done
echo "tsan: build $((built - start)) s, tests $(( $(date +%s) - built )) s"
exit "$failed"
