#!/usr/bin/env bash
# Installs Troupe's build and test dependencies from Debian's packages.
# Idempotent: installs only what is missing and runs `apt-get update` at most once.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates unzip
  libcaf-dev                      # CAF 0.17 actors (core + io)
  libboost-dev libboost-system-dev  # Asio + Beast (header-only) and boost_system
  libsimdjson-dev                 # JSON parsing on the wire
  librocksdb-dev                  # semantic-cache store
  libgtest-dev libgmock-dev       # unit tests
  libbenchmark-dev                # micro-benchmarks
  libhnswlib-dev                  # ANN index
  libtomlplusplus-dev             # config
  libspdlog-dev libfmt-dev        # logging
  libcli11-dev                    # command line
  libpcre2-dev                    # Unicode-aware pre-tokenizer regexes
  libssl-dev openssl              # the cluster: TLS links, HMAC proofs of its secret, certificates
  iproute2                        # network namespaces for the multi-host cluster tests
  python3 python3-venv python3-pip  # test clients and reference scripts
  chromium chromium-driver        # headless browser test of the chat page (tests/clients)
  clang libclang-rt-14-dev        # libFuzzer and its sanitizers: the fuzz targets (scripts/fuzz.sh);
                                  # the runtime is only a Recommends of clang-14, hence named
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${#missing[@]} missing package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
