package benchpeers

import (
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/didip/tollbooth/v7"
	tbl "github.com/didip/tollbooth/v7/limiter"
	"github.com/gin-gonic/gin"
	"github.com/go-chi/httprate"
	fiber2 "github.com/gofiber/fiber/v2"
	fiber2limiter "github.com/gofiber/fiber/v2/middleware/limiter"
	fiber3 "github.com/gofiber/fiber/v3"
	fiber3limiter "github.com/gofiber/fiber/v3/middleware/limiter"
	echo4 "github.com/labstack/echo/v4"
	echo4mw "github.com/labstack/echo/v4/middleware"
	echo5 "github.com/labstack/echo/v5"
	echo5mw "github.com/labstack/echo/v5/middleware"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/ulule/limiter/v3"
	ulgin "github.com/ulule/limiter/v3/drivers/middleware/gin"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

	"github.com/quotagate/quotagate/core"
	"github.com/quotagate/quotagate/echomw"
	"github.com/quotagate/quotagate/echomw/echov5"
	"github.com/quotagate/quotagate/fibermw"
	"github.com/quotagate/quotagate/fibermw/fiberv3"
	"github.com/quotagate/quotagate/ginmw"
	"github.com/quotagate/quotagate/keyfunc"
	"github.com/quotagate/quotagate/nethttp"
)

// Bare names the row of a router without middleware, which the tables
// subtract from every other row of that router.
const Bare = "_bare"

// RemoteAddr is the peer address of every in-process request: every
// contender keys by the client IP, which is this address's.
const RemoteAddr = "203.0.113.9:41000"

// Router is one router with its middleware contenders, the bare router first.
type Router struct {
	Name       string
	Contenders []Middleware
}

// Middleware is one contender on one router.
type Middleware struct {
	Name string
	// New builds the router serving GET / with 200, behind the contender's
	// middleware allowing quota requests per window per client IP.
	// worker returns what one goroutine calls to serve one in-process
	// request (no network) and read its status.
	New func(quota int64, window time.Duration) (worker func() func() int)
}

// Routers lists the routers and their contenders.
func Routers() []Router {
	return []Router{netHTTP(), echoV4(), echoV5(), fiberV2(), fiberV3(), ginRouter()}
}

// recorder is a ResponseWriter that keeps the status and one header map,
// cleared per request, so that the router's cost, not the recorder's, is
// measured.
type recorder struct {
	h    http.Header
	code int
}

func (w *recorder) Header() http.Header         { return w.h }
func (w *recorder) Write(p []byte) (int, error) { w.WriteHeader(http.StatusOK); return len(p), nil }
func (w *recorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

// httpWorker serves one pre-built GET / per call through h.
func httpWorker(h http.Handler) func() func() int {
	return func() func() int {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = RemoteAddr
		w := &recorder{h: make(http.Header, 8)}
		return func() int {
			clear(w.h)
			w.code = 0
			h.ServeHTTP(w, req)
			if w.code == 0 {
				return http.StatusOK
			}
			return w.code
		}
	}
}

func ok(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }

func netHTTP() Router {
	wrap := func(mw func(http.Handler) http.Handler) func() func() int {
		return httpWorker(mw(http.HandlerFunc(ok)))
	}
	return Router{Name: "nethttp", Contenders: []Middleware{
		{Name: Bare, New: func(int64, time.Duration) func() func() int { return httpWorker(http.HandlerFunc(ok)) }},
		{Name: "quotagate", New: func(q int64, w time.Duration) func() func() int {
			return wrap(nethttp.LimitBy(q, w, keyfunc.PeerIP()))
		}},
		{Name: "sethvargo", New: func(q int64, w time.Duration) func() func() int {
			st, err := memorystore.New(&memorystore.Config{Tokens: uint64(q), Interval: w})
			if err != nil {
				panic(err)
			}
			m, err := httplimit.NewMiddleware(st, httplimit.IPKeyFunc())
			if err != nil {
				panic(err)
			}
			return wrap(m.Handle)
		}},
		{Name: "httprate", New: func(q int64, w time.Duration) func() func() int {
			return wrap(httprate.LimitByIP(int(q), w))
		}},
		{Name: "tollbooth", New: func(q int64, w time.Duration) func() func() int {
			lmt := tollbooth.NewLimiter(perSecond(q, w), &tbl.ExpirableOptions{DefaultExpirationTTL: time.Hour})
			lmt.SetBurst(int(q))
			lmt.SetIPLookups([]string{"RemoteAddr"})
			return wrap(func(next http.Handler) http.Handler { return tollbooth.LimitHandler(lmt, next) })
		}},
	}}
}

func echoV4() Router {
	app := func(mw echo4.MiddlewareFunc) func() func() int {
		e := echo4.New()
		if mw != nil {
			e.Use(mw)
		}
		e.GET("/", func(c echo4.Context) error { return c.NoContent(http.StatusOK) })
		return httpWorker(e)
	}
	return Router{Name: "echov4", Contenders: []Middleware{
		{Name: Bare, New: func(int64, time.Duration) func() func() int { return app(nil) }},
		{Name: "quotagate", New: func(q int64, w time.Duration) func() func() int {
			return app(echomw.LimitBy(q, w, keyfunc.PeerIP()))
		}},
		{Name: "quotagate-nofields", New: func(q int64, w time.Duration) func() func() int {
			return app(echomw.LimitBy(q, w, keyfunc.PeerIP(), core.Headers(core.HeadersNone)))
		}},
		{Name: "echo", New: func(q int64, w time.Duration) func() func() int {
			return app(echo4mw.RateLimiter(echo4mw.NewRateLimiterMemoryStoreWithConfig(echo4mw.RateLimiterMemoryStoreConfig{
				Rate: rate.Limit(perSecond(q, w)), Burst: int(q), ExpiresIn: 3 * time.Minute,
			})))
		}},
	}}
}

func echoV5() Router {
	app := func(mw echo5.MiddlewareFunc) func() func() int {
		e := echo5.New()
		if mw != nil {
			e.Use(mw)
		}
		e.GET("/", func(c *echo5.Context) error { return c.NoContent(http.StatusOK) })
		return httpWorker(e)
	}
	return Router{Name: "echov5", Contenders: []Middleware{
		{Name: Bare, New: func(int64, time.Duration) func() func() int { return app(nil) }},
		{Name: "quotagate", New: func(q int64, w time.Duration) func() func() int {
			return app(echov5.LimitBy(q, w, keyfunc.PeerIP()))
		}},
		{Name: "quotagate-nofields", New: func(q int64, w time.Duration) func() func() int {
			return app(echov5.LimitBy(q, w, keyfunc.PeerIP(), core.Headers(core.HeadersNone)))
		}},
		{Name: "echo", New: func(q int64, w time.Duration) func() func() int {
			return app(echo5mw.RateLimiter(echo5mw.NewRateLimiterMemoryStoreWithConfig(echo5mw.RateLimiterMemoryStoreConfig{
				Rate: perSecond(q, w), Burst: int(q), ExpiresIn: 3 * time.Minute,
			})))
		}},
	}}
}

var benchPeer = &net.TCPAddr{IP: net.IPv4(203, 0, 113, 9), Port: 41000}

func fiberV2() Router {
	app := func(mw fiber2.Handler) func() func() int {
		a := fiber2.New(fiber2.Config{DisableStartupMessage: true})
		if mw != nil {
			a.Use(mw)
		}
		a.Get("/", func(c *fiber2.Ctx) error { return c.SendStatus(http.StatusOK) })
		handler := a.Handler()
		return func() func() int {
			var req fasthttp.Request
			req.Header.SetMethod(http.MethodGet)
			req.SetRequestURI("http://127.0.0.1/")
			ctx := new(fasthttp.RequestCtx)
			ctx.Init(&req, benchPeer, nil)
			return func() int {
				ctx.Response.Reset()
				handler(ctx)
				return ctx.Response.StatusCode()
			}
		}
	}
	return Router{Name: "fiberv2", Contenders: []Middleware{
		{Name: Bare, New: func(int64, time.Duration) func() func() int { return app(nil) }},
		{Name: "quotagate", New: func(q int64, w time.Duration) func() func() int {
			return app(fibermw.LimitBy(q, w, keyfunc.PeerIP()))
		}},
		{Name: "fiber", New: func(q int64, w time.Duration) func() func() int {
			return app(fiber2limiter.New(fiber2limiter.Config{Max: int(q), Expiration: w}))
		}},
	}}
}

func fiberV3() Router {
	app := func(mw fiber3.Handler) func() func() int {
		a := fiber3.New()
		if mw != nil {
			a.Use(mw)
		}
		a.Get("/", func(c fiber3.Ctx) error { return c.SendStatus(http.StatusOK) })
		handler := a.Handler()
		return func() func() int {
			var req fasthttp.Request
			req.Header.SetMethod(http.MethodGet)
			req.SetRequestURI("http://127.0.0.1/")
			ctx := new(fasthttp.RequestCtx)
			ctx.Init(&req, benchPeer, nil)
			return func() int {
				ctx.Response.Reset()
				ctx.ResetUserValues()
				handler(ctx)
				return ctx.Response.StatusCode()
			}
		}
	}
	return Router{Name: "fiberv3", Contenders: []Middleware{
		{Name: Bare, New: func(int64, time.Duration) func() func() int { return app(nil) }},
		{Name: "quotagate", New: func(q int64, w time.Duration) func() func() int {
			return app(fiberv3.LimitBy(q, w, keyfunc.PeerIP()))
		}},
		{Name: "fiber", New: func(q int64, w time.Duration) func() func() int {
			return app(fiber3limiter.New(fiber3limiter.Config{Max: int(q), Expiration: w}))
		}},
	}}
}

func ginRouter() Router {
	gin.SetMode(gin.ReleaseMode)
	app := func(mw gin.HandlerFunc) func() func() int {
		r := gin.New()
		if mw != nil {
			r.Use(mw)
		}
		r.GET("/", func(c *gin.Context) { c.Status(http.StatusOK) })
		return httpWorker(r)
	}
	return Router{Name: "gin", Contenders: []Middleware{
		{Name: Bare, New: func(int64, time.Duration) func() func() int { return app(nil) }},
		{Name: "quotagate", New: func(q int64, w time.Duration) func() func() int {
			return app(ginmw.LimitBy(q, w, keyfunc.PeerIP()))
		}},
		{Name: "ulule", New: func(q int64, w time.Duration) func() func() int {
			// ulule/limiter's Gin driver, memory store, keyed by c.ClientIP()
			// (the peer address: no forwarding header is sent).
			return app(ulgin.NewMiddleware(limiter.New(ululemem.NewStore(), limiter.Rate{Period: w, Limit: q})))
		}},
	}}
}
