// Command tiers is an Echo server whose tenants get quotas by tier, all
// from one policy file (policy.yaml): the tiers as plain quotas, which
// tenant is in which tier, and an override. Edit the file and send the
// server SIGHUP (kill -HUP <pid>): the new policy applies at the next
// request. The whole program is the 15 lines of main.
//
//	cd examples/tiers && go run .
//	curl -i -H 'X-Tenant: acme' localhost:8080/
//
// A header says who the tenant is here; in a real API take it from your
// authentication (keyfunc.Tenant reads an Echo value your auth middleware
// set with c.Set). ADDR overrides the address. The server's timeouts are
// those of every example (examples/internal/serve), written out so that
// the program stands alone.
package main

import (
	"cmp"
	"context"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/core/memstore"
	"github.com/quotagate/quotagate/core/policy"
	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/keyfunc"
)

func main() {
	tenant := keyfunc.TenantFunc(func(r *core.Request) (string, bool) { t := r.Header.Get("X-Tenant"); return t, t != "" })
	opts := policy.LoadConfig{Keys: map[string]core.KeyFunc{"tenant": tenant}}
	cfg, err := policy.Load("policy.yaml", opts)
	if err != nil {
		log.Fatal(err)
	}
	eng := core.MustNew(core.Config{Store: memstore.MustNew(memstore.Config{}), Budgets: cfg.Budgets()})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go policy.NewReloader(eng, "policy.yaml", opts, cfg).Watch(context.Background(), hup, func(err error) { log.Println("reloaded policy.yaml; error:", err) })
	e := echo.New()
	e.Use(echomw.MustMiddleware(eng, core.Use("api")))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	srv := &http.Server{Addr: cmp.Or(os.Getenv("ADDR"), "127.0.0.1:8080"), Handler: e, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute}
	log.Fatal(srv.ListenAndServe())
}
