#!/usr/bin/env bash
# ci-gate.sh BASE.json [run args]: an example CI gate. Runs the shipped suite
# (scenarios/*.yaml), writing results/new.json and results/junit.xml (for the CI
# server's test view), then compares against BASE:
#   prefill-bench compare BASE.json results/new.json --json results/compare.json
# Exit: 2 bad input; 3 an internal error in the run; 1 a check failed in the run
# or compare found a regression; 0 otherwise. Without BASE.json (the first run), only the run counts and
# results/new.json is the baseline to keep. Extra arguments go to `run` (e.g.
# --backend cuda); PB_COMPARE_ARGS go to compare (e.g. "--time-threshold 0.05").
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -lt 1 ]; then
  echo "usage: scripts/ci-gate.sh BASE.json [prefill-bench run args...]" >&2
  exit 2
fi
base="$1"
shift
"$root/scripts/build.sh" >/dev/null || exit 2
bin="${PB_BUILD_DIR:-$root/build}/apps/prefill-bench"
results="$root/results"
mkdir -p "$results"

"$bin" run "$root"/scenarios/*.yaml --no-color --json "$results/new.json" --junit "$results/junit.xml" "$@"
run_rc=$?
[ "$run_rc" -eq 2 ] && exit 2
if [ ! -f "$base" ]; then
  echo "ci-gate.sh: no baseline $base: nothing to compare; keep $results/new.json as the baseline" >&2
  exit "$run_rc"
fi
# shellcheck disable=SC2086 # PB_COMPARE_ARGS is a list of options
"$bin" compare "$base" "$results/new.json" --no-color --json "$results/compare.json" ${PB_COMPARE_ARGS:-}
cmp_rc=$?
[ "$cmp_rc" -eq 2 ] && exit 2
[ "$run_rc" -ne 0 ] && exit "$run_rc"
exit "$cmp_rc"
