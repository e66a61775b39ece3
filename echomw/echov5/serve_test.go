package echov5_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/quotagate/quotagate/echomw/echov5"
	"github.com/quotagate/quotagate/internal/slowpeer"
	"github.com/quotagate/quotagate/keyfunc"
)

// TestServeSlowClients: the README's first limit on Echo v5, served
// by an http.Server with timeouts as the README shows, answers or closes
// slow and silent clients within them (slowpeer.Check).
func TestServeSlowClients(t *testing.T) {
	e := echo.New()
	e.Use(echov5.LimitBy(100, time.Minute, keyfunc.PeerIP()))
	ok := func(c *echo.Context) error { return c.String(http.StatusOK, "ok") }
	e.GET("/", ok)
	e.POST("/", ok)
	slowpeer.Check(t, slowpeer.ServeHTTP(t, e))
}
