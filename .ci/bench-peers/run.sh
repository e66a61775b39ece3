#!/usr/bin/env bash
# Measures quotagate beside the Go rate limiters people use instead, and
# writes the tables of docs/performance.md:
#
#   bash .ci/bench-peers/run.sh                        # COUNT=3 passes
#   COUNT=5 bash .ci/bench-peers/run.sh
#   COUNT=1 BENCHTIME=20ms bash .ci/bench-peers/run.sh  # a smoke run
#
# The harness is the Go module in this folder (outside the repository's
# workspace, so that no peer enters quotagate's requirements). The script
# builds its test binary once, checks that every contender is wired right,
# then runs COUNT passes; each pass runs every benchmark once, so every
# contender of a row is measured before the next pass starts and drift on a
# shared machine hits them alike (each pass starts a row one contender
# further on). The Redis benchmarks and the accuracy
# check start their own redis-server on a free 127.0.0.1 port; the delayed
# Redis rows reach it through a proxy in the harness that holds each
# direction 100 µs or 500 µs (a network, without kernel set-up); the
# cluster rows start a Redis Cluster of three masters. Then
# cmd/tables prints the medians as markdown tables and writes them into
# docs/performance.md between its markers (DOC= to write elsewhere, DOC=-
# not to write). Nothing is written when a benchmark failed.
#
# Knobs: COUNT (3 passes); BENCHTIME (for every benchmark; otherwise
# INMEM_BENCHTIME 200ms, MW_BENCHTIME 200ms, REDIS_BENCHTIME 1s);
# ACCURACY_TRIALS (5); OUT (a folder for the raw output; a temporary one by
# default). Not part of CI: benchmarks are not tests.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$here"
export GOWORK=off # the repository's go.work does not list this module

COUNT=${COUNT:-3}
INMEM_BENCHTIME=${BENCHTIME:-${INMEM_BENCHTIME:-200ms}}
MW_BENCHTIME=${BENCHTIME:-${MW_BENCHTIME:-200ms}}
REDIS_BENCHTIME=${BENCHTIME:-${REDIS_BENCHTIME:-1s}}
export ACCURACY_TRIALS=${ACCURACY_TRIALS:-5}
DOC=${DOC:-$repo/docs/performance.md}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

T0=$(date +%s)
log() { echo "[bench-peers +$(($(date +%s) - T0))s load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }

if ! command -v redis-server >/dev/null; then
  echo "redis-server is needed (apt-get install redis-server)" >&2
  exit 1
fi

BIN="$OUT/benchpeers.test"
log "building the harness ($(go version | awk '{print $3}'))"
go test -c -o "$BIN" .
log "checking that every contender is wired right"
"$BIN" -test.run 'AdmitsQuota|Then429' -test.count=1 >"$OUT/wiring.txt" 2>&1 || { cat "$OUT/wiring.txt"; exit 1; }

failed=0
bench() { # group benchtime pass
  BENCHPEERS_PASS=$3 "$BIN" -test.run '^$' -test.bench "^Benchmark$1\$" -test.benchmem -test.count=1 \
    -test.benchtime="$2" -test.timeout=60m >>"$OUT/$1.txt" 2>&1 || {
    failed=1
    log "Benchmark$1 failed in pass $3:"
    grep -A3 -- '--- FAIL' "$OUT/$1.txt" >&2 || tail -20 "$OUT/$1.txt" >&2
  }
}
: >"$OUT/InMem.txt"
: >"$OUT/Middleware.txt"
: >"$OUT/Redis.txt"
: >"$OUT/RedisDelayed.txt"
: >"$OUT/RedisCluster.txt"
for pass in $(seq "$COUNT"); do
  log "pass $pass/$COUNT: in memory ($INMEM_BENCHTIME)"
  bench InMem "$INMEM_BENCHTIME" "$pass"
  log "pass $pass/$COUNT: middleware ($MW_BENCHTIME)"
  bench Middleware "$MW_BENCHTIME" "$pass"
  log "pass $pass/$COUNT: Redis ($REDIS_BENCHTIME)"
  bench Redis "$REDIS_BENCHTIME" "$pass"
  log "pass $pass/$COUNT: Redis through a delaying proxy ($REDIS_BENCHTIME)"
  bench RedisDelayed "$REDIS_BENCHTIME" "$pass"
  log "pass $pass/$COUNT: Redis Cluster of 3 masters ($REDIS_BENCHTIME)"
  bench RedisCluster "$REDIS_BENCHTIME" "$pass"
done
log "Redis accuracy ($ACCURACY_TRIALS trials)"
BENCHPEERS_ACCURACY=1 "$BIN" -test.run '^TestAccuracy$' -test.count=1 -test.v >"$OUT/accuracy.txt" 2>&1 || {
  failed=1
  log "TestAccuracy failed:"
  cat "$OUT/accuracy.txt" >&2
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
bt="benchtime $INMEM_BENCHTIME in memory, $MW_BENCHTIME middleware, $REDIS_BENCHTIME Redis"
if [[ -n "${BENCHTIME:-}" ]]; then bt="benchtime $BENCHTIME"; fi
passes="$COUNT interleaved passes"
if [[ $COUNT == 1 ]]; then passes="1 pass"; fi
method="$cpu, nproc $(nproc); $(go version | awk '{print $3}'); redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1, sharing the cores; $passes ($bt); medians, with the range over passes in parentheses; \`bash .ci/bench-peers/run.sh\`."

docflag=()
if [[ "$DOC" != "-" && $failed == 0 ]]; then docflag=(-doc "$DOC"); fi
go run ./cmd/tables -method "$method" "${docflag[@]}" -accuracy "$OUT/accuracy.txt" \
  "$OUT/InMem.txt" "$OUT/Middleware.txt" "$OUT/Redis.txt" "$OUT/RedisDelayed.txt" "$OUT/RedisCluster.txt" | tee "$OUT/tables.md"
rm -f "$BIN"
if [[ $failed != 0 ]]; then
  log "some benchmarks failed; $DOC left as it was. Raw output: $OUT"
  exit 1
fi
if [[ ${#docflag[@]} -gt 0 ]]; then log "tables written into $DOC"; fi
log "done in $(($(date +%s) - T0)) s. Raw output: $OUT"
