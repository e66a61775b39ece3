#!/usr/bin/env bash
# Measures quotagate next to the best existing Go limiters with the shared
# benchmark harness (../shared/bench-peers), in one run:
#   bash .ci/bench-peers/run.sh            # COUNT=3 passes, ~4 minutes on 2 cores
#   COUNT=5 bash .ci/bench-peers/run.sh
# It copies the harness to a temporary folder, adds quotagate as a contender
# (a replace line to this checkout), runs the harness's run.sh and prints the
# summary. Not part of CI: benchmarks are not tests.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
harness=${HARNESS:-$repo/../shared/bench-peers}
work=$(mktemp -d)
cp -r "$harness"/. "$work"/
cp "$repo/.ci/bench-peers/contender_quotagate.go.txt" "$work/contender_quotagate.go"
cd "$work"
chmod -R u+w .
echo "replace github.com/quotagate/quotagate => $repo" >> go.mod
GOFLAGS=-mod=mod go mod tidy >/dev/null
COUNT=${COUNT:-3} OUT="$work/results" ./run.sh
cat "$work/results/summary.md"
echo "full results: $work/results"
