module github.com/quotagate/quotagate/fibermw/fiberv3

go 1.26.0

require github.com/quotagate/quotagate v0.0.0-00010101000000-000000000000

require github.com/quotagate/quotagate/internal/fastreq v0.0.0-00010101000000-000000000000

replace github.com/quotagate/quotagate => ../..

replace github.com/quotagate/quotagate/internal/fastreq => ../../internal/fastreq

require (
	github.com/gofiber/fiber/v3 v3.1.0
	github.com/valyala/fasthttp v1.69.0
)

require (
	github.com/andybalholm/brotli v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/gofiber/schema v1.7.0 // indirect
	github.com/gofiber/utils/v2 v2.0.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/tinylib/msgp v1.6.3 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
