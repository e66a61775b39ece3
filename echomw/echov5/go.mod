module github.com/quotagate/quotagate/echomw/echov5

go 1.26.0

require github.com/quotagate/quotagate v0.0.0-00010101000000-000000000000

replace github.com/quotagate/quotagate => ../..

require github.com/labstack/echo/v5 v5.4.4

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/time v0.15.0 // indirect
)
