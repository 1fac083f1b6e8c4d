#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (the `fuzz` preset: clang, ASan + UBSan, in build-fuzz/)
# and runs each for SECONDS (default 60) on one core, starting from its seed corpus
# fuzz/corpus/<target>/. What a run finds new is kept in build-fuzz/corpus/<target>/ (not in the
# repository: add an input to fuzz/corpus/ by hand when it matters, a crash always); a crash,
# leak, sanitizer report or broken invariant stops that target with its input saved as
# build-fuzz/artifacts/<target>/crash-*, and the script fails at the end.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 20, scripts/fuzz.sh 600 tokenizer
# Environment: TROUPE_JOBS (build jobs, default nproc), TROUPE_FUZZ_ARGS (more libFuzzer flags).
# Prints a summary line per target: executions, executions per second and coverage (libFuzzer's
# stat:: lines and its last "cov: ... ft: ...").
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
shift || true
jobs="${TROUPE_JOBS:-$(nproc)}"

if ! command -v clang++ > /dev/null; then
  echo "fuzz: clang++ is missing (scripts/setup.sh installs it)" >&2
  exit 1
fi
if [ ! -f build-fuzz/build.ninja ]; then cmake --preset fuzz > /dev/null; fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzz.cpp; do
    n="$(basename "$f" .cpp)"
    targets+=("${n%_fuzz}")
  done
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("${t}_fuzz"); done
cmake --build --preset fuzz -j "$jobs" --target "${build_targets[@]}"

# Each unexpected report stops the run: ASan leaks count, UBSan findings abort (the preset builds
# with -fno-sanitize-recover=undefined).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=()
summary=()
for t in "${targets[@]}"; do
  work="build-fuzz/corpus/$t"
  art="build-fuzz/artifacts/$t"
  mkdir -p "$work" "$art"
  log="build-fuzz/fuzz-$t.log"
  echo "fuzz: $t for ${seconds}s"
  set +e
  # -rss_limit_mb: a parser asked for a huge allocation by a few bytes of header is a finding.
  # -max_len: large enough for a GGUF header with a vocabulary or an HTTP request with a body.
  "build-fuzz/fuzz/${t}_fuzz" "$work" "fuzz/corpus/$t" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -max_len=65536 -timeout=10 -print_final_stats=1 -artifact_prefix="$art/" ${TROUPE_FUZZ_ARGS:-} > "$log" 2>&1
  rc=$?
  set -e
  # (|| true: a run stopped before its first status line has none of these, and pipefail.)
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)"
  rate="$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)"
  # Coverage as libFuzzer counts it: edges (cov) and features (ft) of its last status line.
  cov="$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)"
  if [ $rc -ne 0 ]; then
    failed+=("$t")
    tail -40 "$log"
    summary+=("$t: FAILED after ${execs:-?} executions (log $log, input in $art/)")
  else
    summary+=("$t: ${execs:-?} executions in ${seconds}s (${rate:-?}/s), ${cov:-cov: ?}, no finding")
  fi
done
echo "fuzz: summary ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) found a problem: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran clean"
