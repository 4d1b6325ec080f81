#!/usr/bin/env bash
# fuzz.sh -- builds the libFuzzer targets of test/fuzz with clang and runs each
# for a bounded time (what `make fuzz` runs, and .ci/run's short pass):
#
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]   (default: every target)
#
#   1. configure BUILD_DIR with CC=clang -DGP_FUZZ=ON and build the `fuzz`
#      target only (every library instrumented: fuzzer-no-link, ASan, UBSan);
#   2. run each target for SECONDS (-max_total_time) on its seed corpus,
#      test/fuzz/corpus/<target>/, read-only: new inputs go to the scratch
#      directory BUILD_DIR/corpus/<target>/ (kept between runs, so the next
#      run starts where this one ended), crashes to BUILD_DIR/crashes/;
#      FUZZ_JOBS targets at a time (default 1), each at nice 19;
#   3. print one line per target (executions, exec/s, cov, ft, corpus size)
#      and exit 1 when any target crashed, leaked, timed out or ran out of
#      memory, naming the input that did it (to keep it as a regression
#      input: docs/testing.md, "Fuzzing").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if (($# < 2)); then
  echo "usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]" >&2
  exit 2
fi
build=$1 secs=$2
shift 2
jobs=${FUZZ_JOBS:-1}
command -v clang >/dev/null || { echo "fuzz: clang is not installed (scripts/install-deps.sh)" >&2; exit 1; }

CC=clang cmake -S . -B "$build" -DGP_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
cmake --build "$build" --target fuzz -j "$(nproc)" -- --no-print-directory >/dev/null || {
  echo "fuzz: build failed (cmake --build $build --target fuzz)" >&2
  exit 1
}

targets=("$@")
if ((${#targets[@]} == 0)); then
  for d in test/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
mkdir -p "$build/logs" "$build/crashes"

run_one() {
  local t=$1 exe="$build/fuzz/fuzz_$1"
  [[ -x $exe ]] || { echo "fuzz: no target $t ($exe)" >"$build/logs/$t.log"; return 1; }
  mkdir -p "$build/corpus/$t"
  # stdin from /dev/null: an input naming /dev/stdin as a file reads EOF, not the terminal.
  nice -n 19 "$exe" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/crashes/$t-" "$build/corpus/$t" "test/fuzz/corpus/$t" \
    </dev/null >"$build/logs/$t.log" 2>&1
}
export -f run_one
export build secs

printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}; echo $? >"$build/logs/{}.rc"'

failed=0
printf '%-15s %10s %8s %6s %6s %14s  %s\n' target execs exec/s cov ft corpus result
for t in "${targets[@]}"; do
  log="$build/logs/$t.log"
  rc=$(cat "$build/logs/$t.rc" 2>/dev/null || echo 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  last=$(grep -E '^#[0-9]+[[:space:]]+(DONE|NEW|REDUCE|pulse|INITED)' "$log" | tail -n1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$last")
  result=ok
  if [[ $rc != 0 ]]; then
    failed=1
    result="FAILED (exit $rc): $(grep -m1 -E 'SUMMARY|ERROR: libFuzzer|==ERROR' "$log")"
    art=$(grep -m1 -o 'Test unit written to .*' "$log" | sed 's/Test unit written to //')
    [[ -n $art ]] && result+=" input: $art"
  fi
  printf '%-15s %10s %8s %6s %6s %14s  %s\n' "$t" "${execs:--}" "${rate:--}" "${cov:--}" \
    "${ft:--}" "${corp:--}" "$result"
done
if ((failed)); then
  echo "fuzz: a target failed; logs in $build/logs/. Fix the bug, then keep the input as" \
    "test/fuzz/corpus/<target>/crash-<what> (docs/testing.md)" >&2
fi
exit $failed
