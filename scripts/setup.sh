#!/usr/bin/env bash
# Installs the Debian 12 packages Cascade needs (only those missing) and builds it in
# ./build. Safe to re-run; the second run only rebuilds what changed.
#
#   ./scripts/setup.sh            # Release build with tests and benchmarks
#   BUILD_TYPE=Debug ./scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libabsl-dev libopenmpi-dev openmpi-bin slurm-wlm munge
  nlohmann-json3-dev libpcre2-dev libcli11-dev libspdlog-dev libfmt-dev
  libyaml-cpp-dev libmicrohttpd-dev libcpp-httplib-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev etcd-server
  clang libclang-rt-14-dev
  python3 python3-grpcio python3-grpc-tools python3-numpy python3-prometheus-client
  iproute2 procps nftables openssl libssl-dev curl
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

JOBS=${JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" ${CMAKE_ARGS:-}
cmake --build build -j"$JOBS"
