#!/usr/bin/env bash
# What a user's build list holds: for each router adapter, a tiny program
# (LimitBy with keyfunc.PeerIP) in a module of its own that requires this
# checkout through replace lines; prints how many modules `go list -m all`
# lists besides the program's own, and which of them are routers,
# exporters, Redis or fasthttp.
#   bash .ci/buildlist.sh            # this checkout
#   bash .ci/buildlist.sh /path/to/other/checkout
# Not part of CI (it resolves modules through the proxy).
set -uo pipefail
SRC=$(cd "${1:-$(dirname "$0")/..}" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for a in nethttp gin echo echov5 fiber fiberv3; do
  d=$WORK/$a; rm -rf $d; mkdir -p $d
  case $a in
   nethttp) imp='"net/http"; "github.com/quotagate/quotagate/nethttp"'; body='h := nethttp.LimitBy(100, time.Minute, key)(http.NotFoundHandler()); _ = h';;
   gin) imp='"github.com/gin-gonic/gin"; "github.com/quotagate/quotagate/ginmw"'; body='r := gin.New(); r.Use(ginmw.LimitBy(100, time.Minute, key))';;
   echo) imp='"github.com/labstack/echo/v4"; "github.com/quotagate/quotagate/echomw"'; body='e := echo.New(); e.Use(echomw.LimitBy(100, time.Minute, key))';;
   echov5) imp='"github.com/labstack/echo/v5"; "github.com/quotagate/quotagate/echomw/echov5"'; body='e := echo.New(); e.Use(echov5.LimitBy(100, time.Minute, key))';;
   fiber) imp='"github.com/gofiber/fiber/v2"; "github.com/quotagate/quotagate/fibermw"'; body='app := fiber.New(); app.Use(fibermw.LimitBy(100, time.Minute, key))';;
   fiberv3) imp='"github.com/gofiber/fiber/v3"; "github.com/quotagate/quotagate/fibermw/fiberv3"'; body='app := fiber.New(); app.Use(fiberv3.LimitBy(100, time.Minute, key))';;
  esac
  cat > $d/main.go <<EOT
package main

import ("time"; "github.com/quotagate/quotagate/keyfunc"; $imp)

func main() {
	key := keyfunc.PeerIP()
	$body
}
EOT
  cd $d
  printf 'module example.com/%s\n\ngo 1.26\n' $a > go.mod
  echo "replace github.com/quotagate/quotagate => $SRC" >> go.mod
  for m in ginmw echomw echomw/echov5 fibermw fibermw/fiberv3 core/redisstore core/metrics core/otelmetrics internal/fastreq; do
    [ -f $SRC/$m/go.mod ] && echo "replace github.com/quotagate/quotagate/$m => $SRC/$m" >> go.mod
  done
  gofmt -w main.go
  GOFLAGS=-mod=mod GOWORK=off go mod tidy >"$WORK/$a.tidy" 2>&1 || { echo "$a: go mod tidy failed"; tail -5 "$WORK/$a.tidy"; }
  GOWORK=off go build -o /dev/null . || echo "$a build failed"
  n=$(( $(GOWORK=off go list -m all | wc -l) - 1 ))
  bad=$(GOWORK=off go list -m all | grep -E 'gin-gonic|labstack|gofiber|prometheus|opentelemetry|go-redis|fasthttp' | awk '{print $1}' | sed 's#github.com/##;s#go.opentelemetry.io/##' | tr '\n' ' ')
  echo "$a: $n modules; heavy: $bad"
  cd "$WORK"
done
