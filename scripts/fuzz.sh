#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (the `fuzz` preset: clang, ASan + UBSan, in build-fuzz/)
# and runs each for SECONDS (default 60) on one core, starting from its seed corpus
# fuzz/corpus/<target>/. What a run finds new is kept in build-fuzz/corpus/<target>/ (not in the
# repository: add an input to fuzz/corpus/ by hand when it matters, a crash always); a crash,
# leak, sanitizer report or broken invariant stops that target with its input saved as
# build-fuzz/artifacts/<target>/crash-*, and the script fails at the end.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 20, scripts/fuzz.sh 600 tokenizer
# Environment: TROUPE_JOBS (build jobs, default nproc), TROUPE_FUZZ_ARGS (more libFuzzer flags),
# TROUPE_FUZZ_RUNS (stop each target after that many executions, SECONDS then only bounds it:
# e.g. TROUPE_FUZZ_RUNS=10000000 scripts/fuzz.sh 36000 gguf_reader), TROUPE_FUZZ_BUILD=0 (run the
# targets as built, without building them first), TROUPE_FUZZ_TIMEOUT (seconds one input may
# take before libFuzzer calls it a hang, default 10; see below).
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
if [ "${TROUPE_FUZZ_BUILD:-1}" != 0 ]; then
  cmake --build --preset fuzz -j "$jobs" --target "${build_targets[@]}"
fi

# The longest input libFuzzer makes for a target (-max_len; libFuzzer's own default is 4096, and
# a longer seed is cut there). Longer inputs cost more per execution (BPE, JSON and TOML work
# grows with the text) and reach no more code unless a length or count limit needs them, so:
# - 65536 where a big input is the point: a GGUF or safetensors header with a vocabulary or
#   tensor table, an HTTP request with its body (up to the body limits of the target);
# - 8192 for the JSON request decoders: their largest count limits (1024 `logit_bias` entries,
#   2048 embedding inputs) fit in about 6.2 KB; past that only strings grow;
# - 8192 for TOML: a config with every key is about 2.4 KB without comments (the seed
#   reference_compact.toml), the commented reference.toml is cut, its keys are in the compact one;
# - 4096 for the tokenizer, detokenizer, chat template and grammar: their work is per token,
#   per message or per rule, with no limit past a few KB (a longer text is more of the same
#   pre-tokenizer pieces, a longer id stream more of the same pushes).
max_len_of() {
  case "$1" in
    gguf_reader | safetensors_reader | http_request) echo 65536 ;;
    openai_request | ws_protocol | embedding_request | tokenize_request | config_toml) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

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
  max_len="$(max_len_of "$t")"
  runs=()
  if [ -n "${TROUPE_FUZZ_RUNS:-}" ]; then runs=(-runs="$TROUPE_FUZZ_RUNS"); fi
  echo "fuzz: $t for ${seconds}s${TROUPE_FUZZ_RUNS:+ or $TROUPE_FUZZ_RUNS executions} (max_len $max_len)"
  set +e
  # -rss_limit_mb: a parser asked for a huge allocation by a few bytes of header is a finding.
  # -timeout counts wall-clock time: a run paused with SIGSTOP (to free a shared core for a
  # benchmark) reports the input it was on as a timeout when continued, so long runs on a shared
  # machine raise TROUPE_FUZZ_TIMEOUT (a real hang then shows as a slow-unit-* artifact first).
  "build-fuzz/fuzz/${t}_fuzz" "$work" "fuzz/corpus/$t" -max_total_time="$seconds" "${runs[@]}" -rss_limit_mb=2048 \
    -max_len="$max_len" -timeout="${TROUPE_FUZZ_TIMEOUT:-10}" -print_final_stats=1 -artifact_prefix="$art/" ${TROUPE_FUZZ_ARGS:-} > "$log" 2>&1
  rc=$?
  set -e
  # (|| true: a run stopped before its first status line has none of these, and pipefail.)
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)"
  rate="$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)"
  # Coverage as libFuzzer counts it: edges (cov) and features (ft) of its last status line.
  cov="$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)"
  took="$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' | tail -1 || true)"
  if [ $rc -ne 0 ]; then
    failed+=("$t")
    tail -40 "$log"
    summary+=("$t: FAILED after ${execs:-?} executions (log $log, input in $art/)")
  else
    summary+=("$t: ${execs:-?} executions in ${took:-?}s (${rate:-?}/s, max_len $max_len), ${cov:-cov: ?}, no finding")
  fi
done
echo "fuzz: summary ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) found a problem: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran clean"
