#!/usr/bin/env bash
# The process-words check over every tracked file (tests/lint_words.sh: no
# work-period, issue or step numbers, no commit hashes, the contract cited by
# heading), the layers of the product folders (tests/lint_layers.py: which
# folder may include which, no cycle), then static analysis: clang-tidy
# (checks in .clang-tidy) and cppcheck over fencegate's own sources, through
# the compile database of a configure-only clang build directory. clang-tidy
# reads app/, proxy/, admin/, locks/, fence/, net/, storage/, tls/, config/
# and metrics/ -- every header they include from those directories too; cppcheck
# reads those and the tests (unit tests and fuzz targets). (clang-tidy over
# test code would double the stage's time: each fuzz target alone costs as
# much as a proxy source, for code that only drives the code under test.)
# tests/run.sh runs it first (FENCEGATE_SKIP_LINT=1 skips it).
#
#   bash tests/lint.sh              # all four, every source
#   bash tests/lint.sh words        # only the process-words check (no cmake)
#   bash tests/lint.sh layers       # only the layers check (no cmake)
#   bash tests/lint.sh tidy         # only clang-tidy, every source (the full mode)
#   bash tests/lint.sh tidy-change  # clang-tidy over the sources a change touches
#                                   # (tests/lint_changed.py says which: what
#                                   # changed since a base commit, and one
#                                   # source through which each changed
#                                   # header is read)
#   bash tests/lint.sh cppcheck     # only cppcheck
#
# Any finding fails it: clang-tidy runs with WarningsAsErrors '*', cppcheck
# with --error-exitcode=1. A finding is fixed in the code; where a check is
# wrong about one line, that line carries a NOLINT(check) or a
# cppcheck-suppress comment with the reason next to it. docs/development.md
# says which checks are on and why some are off.
#
# Environment:
#   FENCEGATE_LINT_BUILD_DIR  where the compile database is generated
#                             (default build-lint/ at the repo root; nothing is compiled)
#   LINT_JOBS                 parallel clang-tidy / cppcheck processes (default 2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${FENCEGATE_LINT_BUILD_DIR:-$ROOT/build-lint}"
JOBS="${LINT_JOBS:-2}"
PRODUCT_DIRS=(app proxy admin locks fence net storage tls config metrics)
TIDY_DIRS=("${PRODUCT_DIRS[@]}")
CPPCHECK_DIRS=("${PRODUCT_DIRS[@]}" tests)
tools=("$@")
[[ ${#tools[@]} -gt 0 ]] || tools=(words layers tidy cppcheck)

started=$(date +%s)
mkdir -p "$BUILD"
db="$BUILD/compile_commands.json"
tidy_files=()
cppcheck_files=()
# The sources of $db under the given directories, one a line.
sources() {
  local re
  re="$(IFS='|'; echo "$*")"
  sed -n 's/^ *"file": "\(.*\)",\{0,1\}$/\1/p' "$db" | grep -E "^$ROOT/($re)/" | sort -u
}
# Only clang-tidy and cppcheck need the compile database.
if [[ " ${tools[*]} " == *" tidy"* || " ${tools[*]} " == *" cppcheck "* ]]; then
  # clang's own command lines, so that clang-tidy sees exactly what clang
  # compiles. The fuzz targets are configured as replay programs (plain
  # sources, no -fsanitize=fuzzer), the benchmarks are left out.
  (cd "$ROOT" && cmake --preset lint -B "$BUILD" >/dev/null)
  mapfile -t tidy_files < <(sources "${TIDY_DIRS[@]}")
  mapfile -t cppcheck_files < <(sources "${CPPCHECK_DIRS[@]}")
  if [[ ${#tidy_files[@]} -eq 0 || ${#cppcheck_files[@]} -eq 0 ]]; then
    echo "lint: no project source in $db" >&2
    exit 1
  fi
  if [[ " ${tools[*]} " == *" tidy-change "* ]]; then
    printf '%s\n' "${tidy_files[@]}" |
      python3 "$ROOT/tests/lint_changed.py" --root "$ROOT" --explain >"$BUILD/tidy-change.txt"
    mapfile -t changed_files <"$BUILD/tidy-change.txt"
  fi
fi

failed=()
summary=()
for tool in "${tools[@]}"; do
  t0=$(date +%s)
  log="$BUILD/$tool.log"
  rc=0
  case "$tool" in
    words)
      # Every tracked file (not only sources); one finding a line.
      mapfile -t files < <(git -C "$ROOT" ls-files)
      bash "$ROOT/tests/lint_words.sh" >"$log" 2>&1 || rc=$?
      findings=$(grep -c ': \[[a-zA-Z]*\] ' "$log" || true)
      ;;
    layers)
      # The includes of the product folders' tracked sources and the links
      # of their CMakeLists.txt; one finding a line.
      mapfile -t files < <(git -C "$ROOT" ls-files "${PRODUCT_DIRS[@]}" |
        grep -E '(\.(h|hh|hpp|cc|cpp)|CMakeLists\.txt)$')
      python3 "$ROOT/tests/lint_layers.py" >"$log" 2>&1 || rc=$?
      findings=$(grep -c ': \[[a-z]*\] ' "$log" || true)
      ;;
    tidy|tidy-change)
      # One clang-tidy per source, $JOBS at a time; the headers they include
      # are checked through HeaderFilterRegex (.clang-tidy).
      if [[ $tool == tidy ]]; then
        files=("${tidy_files[@]}")
      else
        files=("${changed_files[@]}")
      fi
      : >"$log"
      if [[ ${#files[@]} -gt 0 ]]; then
        printf '%s\n' "${files[@]}" |
          xargs -P "$JOBS" -n 1 clang-tidy -p "$BUILD" --quiet >"$log" 2>&1 || rc=$?
      fi
      findings=$(grep -cE '^[^ ].*:[0-9]+:[0-9]+: (warning|error):' "$log" || true)
      ;;
    cppcheck)
      files=("${cppcheck_files[@]}")
      filters=()
      for f in "${files[@]}"; do filters+=("--file-filter=$f"); done
      # Suppressions, each with its reason:
      #  - cppcheckError in lock_service_test.cc: cppcheck 2.10 stops with an
      #    internal error ("MathLib::toLongNumber: input was not completely
      #    consumed: 3s") on that file's std::chrono literals; clang-tidy
      #    still checks the file.
      #  - missingIncludeSystem: cppcheck is not given the system include
      #    paths (Boost, RocksDB, gtest would make it slow and are not ours);
      #    the googletest library file tells it what TEST() means.
      #  - preprocessorErrorDirective in net/read_attempt.cc: without Boost's
      #    headers BOOST_VERSION is unknown to cppcheck, so the #error that
      #    refuses another Boost fires; the compilers see the real version.
      cppcheck --project="$db" "${filters[@]}" -j "$JOBS" --quiet --std=c++20 \
        --enable=warning,performance,portability --library=googletest \
        --inline-suppr --error-exitcode=1 \
        --suppress="cppcheckError:$ROOT/tests/locks/lock_service_test.cc" \
        --suppress=missingIncludeSystem \
        --suppress="preprocessorErrorDirective:$ROOT/net/read_attempt.cc" \
        --template='{file}:{line}:{column}: {severity}: {message} [{id}]' >"$log" 2>&1 || rc=$?
      findings=$(grep -cE '^[^ ].*:[0-9]+:[0-9]+: ' "$log" || true)
      ;;
    *) echo "lint: unknown tool $tool (words, layers, tidy, tidy-change or cppcheck)" >&2; exit 2 ;;
  esac
  secs=$(( $(date +%s) - t0 ))
  line="$tool: ${#files[@]} files, $findings findings, exit $rc, ${secs} s"
  if [[ $rc -ne 0 || $findings -gt 0 ]]; then
    failed+=("$tool")
    echo "---- $tool findings ($log):"
    if [[ $tool == words || $tool == layers ]]; then
      head -n 200 "$log"
    else
      grep -E -A3 '^[^ ].*:[0-9]+:[0-9]+: (warning|error|style|performance|portability)' "$log" |
        head -n 200 || tail -n 60 "$log"
    fi
  fi
  echo "lint: $line"
  summary+=("$line")
done

echo "lint summary ($(( $(date +%s) - started )) s):"
printf '  %s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "lint: FAILED: ${failed[*]}"
  exit 1
fi
echo "lint: OK, 0 findings"
