#!/usr/bin/env bash
# Installs what fencegate needs to build, test and run its demo on Debian
# bookworm, from Debian's own archive only. Idempotent: packages that are
# already installed are skipped, and when nothing is missing apt is not
# touched at all (no `apt-get update`, no network).
#
# Usage: bash docker/install-deps.sh [--build | --runtime]
#                                          (as root, or with sudo available)
#   (no flag)   everything: build, tests, demo, lint (what CI and developers use)
#   --build     only what building the fencegate binary needs (the container
#               image's build stage: tests and benchmarks off)
#   --runtime   only what running the built binary needs: its shared libraries
#               and curl for health checks (the container image's final stage)
set -euo pipefail

# Building the binary: the compiler, CMake and the libraries' -dev packages.
BUILD_PACKAGES=(
  cmake ninja-build g++ pkg-config
  libboost1.81-all-dev librocksdb-dev nlohmann-json3-dev libyaml-cpp-dev
  libspdlog-dev libcli11-dev libssl-dev libsystemd-dev prometheus-cpp-dev
)
# Running the binary: the shared libraries it links (ldd build/app/fencegate;
# RocksDB is linked statically, its compression libraries are not).
RUNTIME_PACKAGES=(
  libspdlog1.10 libfmt9 libyaml-cpp0.7 libssl3 libsystemd0
  libsnappy1v5 liblz4-1 libzstd1 libbz2-1.0 zlib1g libprometheus-cpp-core1.0
  curl ca-certificates
)
# Tests, the demo, benchmarks and static analysis.
DEV_PACKAGES=(
  openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  nginx apache2 python3 python3-pytest python3-yaml python3-prometheus-client
  etcd-server etcd-client redis-server zookeeperd python3-kazoo haproxy
  wrk linux-perf valgrind
  clang libclang-rt-14-dev clang-tidy cppcheck
  llvm  # /usr/bin/llvm-symbolizer: names the lines in ASan/UBSan/fuzzer reports
)

case "${1:-}" in
  "") PACKAGES=("${BUILD_PACKAGES[@]}" "${RUNTIME_PACKAGES[@]}" "${DEV_PACKAGES[@]}") ;;
  --build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  --runtime) PACKAGES=("${RUNTIME_PACKAGES[@]}") ;;
  *) echo "install-deps: unknown argument '$1' (--build, --runtime or none)" >&2; exit 2 ;;
esac

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
# Debian's apache2 starts and enables a system service on port 80 when it is
# installed; the tests run their own. Stop it and keep it off at boot.
if [[ " ${missing[*]} " == *" apache2 "* ]]; then
  if [[ -d /run/systemd/system ]]; then
    "${SUDO[@]}" systemctl disable --now apache2.service apache-htcacheclean.service
  else
    "${SUDO[@]}" service apache2 stop
    "${SUDO[@]}" update-rc.d apache2 disable
  fi
fi
