#!/usr/bin/env bash
# What a user's build list holds: for each router adapter, a tiny program
# (LimitBy with keyfunc.PeerIP) in a module of its own that requires this
# checkout through replace lines; prints how many modules `go list -m all`
# lists besides the program's own, and which of them are routers,
# exporters, Redis or fasthttp.
#   bash .ci/buildlist.sh            # this checkout
#   bash .ci/buildlist.sh /path/to/other/checkout
# Not part of CI (it resolves modules through the proxy).
#
# The adapters are found, not listed: every package that declares ForLayer
# (nethttp, and each router's module); the replace lines name every module
# of the checkout's workspace (go.work).
set -uo pipefail
SRC=$(cd "${1:-$(dirname "$0")/..}" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ROOT=github.com/quotagate/quotagate
adapters=$(cd "$SRC" && grep -rl --include='*.go' --exclude='*_test.go' '^func ForLayer(' . |
  grep -v -e '^\./\.' -e '^\./examples/' | xargs -n1 dirname | sed 's|^\./||' | sort -u)
replaces=$(cd "$SRC" && go list -m -f '{{.Path}} => {{.Dir}}' | grep -v "^$ROOT => ")
for a in $adapters; do
  name=$(basename "$a")
  d=$WORK/$name; rm -rf "$d"; mkdir -p "$d"
  cat > "$d/main.go" <<EOT
package main

import ("time"; "$ROOT/keyfunc"; "$ROOT/$a")

func main() { _ = $name.LimitBy(100, time.Minute, keyfunc.PeerIP()) }
EOT
  cd "$d"
  printf 'module example.com/%s\n\ngo 1.26\n' "$name" > go.mod
  echo "replace $ROOT => $SRC" >> go.mod
  [ -n "$replaces" ] && sed 's/^/replace /' <<<"$replaces" >> go.mod
  gofmt -w main.go
  GOFLAGS=-mod=mod GOWORK=off go mod tidy >"$WORK/$name.tidy" 2>&1 || { echo "$a: go mod tidy failed"; tail -5 "$WORK/$name.tidy"; }
  GOWORK=off go build -o /dev/null . || echo "$a build failed"
  n=$(( $(GOWORK=off go list -m all | wc -l) - 1 ))
  bad=$(GOWORK=off go list -m all | grep -E 'gin-gonic|labstack|gofiber|prometheus|opentelemetry|go-redis|fasthttp' | awk '{print $1}' | sed 's#github.com/##;s#go.opentelemetry.io/##' | tr '\n' ' ')
  echo "$a: $n modules; heavy: $bad"
  cd "$WORK"
done
