#!/usr/bin/env bash
# run.sh: the main job. Builds if needed, then runs the default scenario suite
# (every file in scenarios/) on the best backend present (cuda when a GPU is
# there, host otherwise), prints the report table, writes results/report.json.
# Extra arguments go to `prefill-bench run` (e.g. --backend host, --inject NAME).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${PB_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" >/dev/null
mkdir -p "$root/results"
exec "$build/apps/prefill-bench" run "$root"/scenarios/*.yaml --json "$root/results/report.json" "$@"
