#!/usr/bin/env bash
# Sets up a fresh machine, builds Troupe, fetches the model and runs every test:
# the Release suite (unit, real-model and example tests), then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer. Both include the fuzz corpora, replayed
# (ctest fuzz.<target>), and the short fuzz pass (fuzz.<target>.mutate: 15 s of blind mutation
# per target with a fixed seed; docs/reliability.md). libFuzzer itself: scripts/fuzz.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${TROUPE_JOBS:-$(nproc)}"

bash scripts/setup.sh
bash scripts/fetch-model.sh
bash scripts/build.sh

echo "test: Release suite"
ctest --preset release -j "$jobs"

echo "test: unit tests under ASan + UBSan"
cmake --preset asan > /dev/null
cmake --build --preset asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --preset asan -j "$jobs"
echo "test: all suites passed"
