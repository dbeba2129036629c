#!/usr/bin/env bash
# Process words: the tree speaks of the product, never of the work that made
# it. Code, comments, test names, scripts, configs, fuzz dictionaries and docs
# say what fencegate does and why, in the present tense; they do not number
# work periods, issues, steps of past work or runs, and do not quote commit
# hashes. The contract is cited by heading (docs/contract.md, "Admin API"), an
# upstream project's bug by its full URL.
#
#   bash tests/lint_words.sh                # every tracked file
#   bash tests/lint_words.sh proxy README.md  # only these files or directories
#
# Reads the tracked files (git ls-files), skips binary ones, needs no build.
# Prints FILE:LINE: [pattern] TEXT for each finding and exits 1 if there is
# any. tests/lint.sh runs it over the whole tree (the "words" tool).
#
# The patterns (case-insensitive unless said otherwise):
#   session      "session" followed by a number
#   sNN          "s" and two digits as a word, in Markdown, and after a
#                comment marker (//, /*, *, #) elsewhere (in code it can be a
#                variable); not in fuzz corpora, whose bytes are arbitrary
#   issue        "issue" followed by a number, unless inside a URL
#   step         "step" followed by a number
#   wave         "wave" followed by a number
#   run          "run #" and a number
#   spec         an upper-case SPEC followed by a number, by the word
#                "section", by a section sign or by ".md" (case-sensitive)
#   hash         7 to 40 lower-case hex digits with at least one letter and
#                one digit, as a word (a commit hash), in *.md, *.txt, *.sh,
#                *.py, *.cmake, CMakeLists.txt and executable scripts; not
#                32 digits, the length of a request id (X-Request-Id) in an
#                example; tests/lint_words.allow lists the hex words that are
#                data
#   path         a tracked file's path with "session", "issue", "step" or
#                "wave" and a number, "s" and two digits, or a commit hash
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ALLOW="$ROOT/tests/lint_words.allow"

paths=()
for p in "$@"; do
  [[ "$p" == /* ]] || p="$PWD/$p"
  [[ -e "$p" ]] || { echo "lint_words: no such file or directory: $p" >&2; exit 2; }
  paths+=("$p")
done
[[ ${#paths[@]} -gt 0 ]] || paths=("$ROOT")

# git grep over the given paths: -n line numbers, -I no binary files, -P PCRE.
# Prints nothing (and succeeds) when nothing matches.
search() {
  git -C "$ROOT" grep -n -I -P "$@" || [[ $? -eq 1 ]]
}

found=0
report() {  # report NAME: FILE:LINE:TEXT lines on stdin
  local line file rest text
  while IFS= read -r line; do
    file="${line%%:*}"
    rest="${line#*:}"
    text="${rest#*:}"
    text="${text#"${text%%[![:space:]]*}"}"
    printf '%s:%s: [%s] %s\n' "$file" "${rest%%:*}" "$1" "${text:0:160}"
    found=$((found + 1))
  done
}

COMMENT='(//|/\*|^\s*\*|#)'
report session < <(search -i -e '\bsessions?[ -]?[0-9]+' -- "${paths[@]}")
report sNN < <(search -i -e '\bs[0-9]{2}\b' -- "${paths[@]}" | grep -E '^[^:]*\.md:' || true)
report sNN < <(search -i -e "$COMMENT"'.*\bs[0-9]{2}\b' -- "${paths[@]}" \
  ':(exclude)*.md' ':(exclude)tests/fuzz/corpus/*')
report issue < <(search -i -e '(?<![/=\w])issues?[ #]*[0-9]+' -- "${paths[@]}")
report step < <(search -i -e '\bsteps?[ -]?[0-9]+' -- "${paths[@]}")
report wave < <(search -i -e '\bwaves?[ -]?[0-9]+' -- "${paths[@]}")
report run < <(search -i -e '\bruns? ?#[0-9]+' -- "${paths[@]}")
report spec < <(search -e '\bSPEC(\.md\b|[ \t]*(sections?\b|§|[0-9]))' -- "${paths[@]}")

# Commit hashes, in the kinds of files where they are text, not data.
declare -A executable=()
while read -r mode _ _ file; do
  [[ "$mode" == 100755 ]] && executable["$file"]=1
done < <(git -C "$ROOT" ls-files -s -- "${paths[@]}")
declare -A allowed=()
if [[ -f "$ALLOW" ]]; then
  while read -r word _; do
    [[ -z "$word" || "$word" == \#* ]] || allowed["$word"]=1
  done <"$ALLOW"
fi
while IFS= read -r hit; do
  file="${hit%%:*}"
  rest="${hit#*:}"
  word="${rest#*:}"
  case "$file" in
    *.md | *.txt | *.sh | *.py | *.cmake) ;;
    *) [[ -n "${executable[$file]:-}" ]] || continue ;;
  esac
  [[ -z "${allowed[$word]:-}" ]] || continue
  printf '%s:%s: [hash] %s\n' "$file" "${rest%%:*}" "$word"
  found=$((found + 1))
done < <(search -o -e \
  '(?<![.\w])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])(?:[0-9a-f]{7,31}|[0-9a-f]{33,40})\b' \
  -- "${paths[@]}")

# File names: a name is read as often as a line.
while IFS= read -r file; do
  printf '%s: [path] %s\n' "$file" "the file's name"
  found=$((found + 1))
done < <(git -C "$ROOT" ls-files -- "${paths[@]}" | grep -iP \
  '(session|issue|step|wave)s?[-_ ]?[0-9]+|(?<![a-z0-9])s[0-9]{2}(?![0-9a-z])|(?<![0-9a-z.])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9a-z])' \
  || true)

if [[ $found -gt 0 ]]; then
  echo "lint_words: $found finding(s): say what the product does and why, in the present tense" \
    "(tests/lint_words.sh lists the patterns)"
  exit 1
fi
echo "lint_words: OK"
