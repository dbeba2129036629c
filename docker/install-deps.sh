#!/usr/bin/env bash
# Installs what fencegate needs to build, test and run its demo on Debian
# bookworm, from Debian's own archive only. Idempotent: packages that are
# already installed are skipped, and when nothing is missing apt is not
# touched at all (no `apt-get update`, no network).
#
# Usage: bash docker/install-deps.sh        (as root, or with sudo available)
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ pkg-config
  libboost1.81-all-dev librocksdb-dev nlohmann-json3-dev libyaml-cpp-dev
  libspdlog-dev libcli11-dev libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev prometheus-cpp-dev
  nginx curl python3 python3-pytest python3-prometheus-client ca-certificates
  etcd-server etcd-client redis-server zookeeperd python3-kazoo haproxy
  wrk linux-perf valgrind
  clang libclang-rt-14-dev clang-tidy cppcheck
  llvm  # /usr/bin/llvm-symbolizer: names the lines in ASan/UBSan/fuzzer reports
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

if [[ -r /etc/os-release ]]; then
  # shellcheck disable=SC1091
  codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
  if [[ "$codename" != "bookworm" && -z "${FENCEGATE_ALLOW_OTHER_OS:-}" ]]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: this script installs Debian bookworm's packages; found '${codename:-unknown}'." >&2
    echo "install-deps: install the equivalents by hand, or set FENCEGATE_ALLOW_OTHER_OS=1 to try anyway" >&2
    exit 1
  fi
fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: not root and sudo is not available; install them as root" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
