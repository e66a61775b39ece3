package ginmw_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/quotagate/quotagate/ginmw"
	"github.com/quotagate/quotagate/internal/slowpeer"
	"github.com/quotagate/quotagate/keyfunc"
)

// TestServeSlowClients: the README's first limit on Gin, served by
// an http.Server with timeouts as the README shows, answers or closes
// slow and silent clients within them (slowpeer.Check).
func TestServeSlowClients(t *testing.T) {
	r := gin.New()
	r.Use(ginmw.LimitBy(100, time.Minute, keyfunc.PeerIP()))
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	r.GET("/", ok)
	r.POST("/", ok)
	slowpeer.Check(t, slowpeer.ServeHTTP(t, r))
}
