module github.com/quotagate/quotagate/internal/fastreq

go 1.26.0

require github.com/quotagate/quotagate v0.0.0-00010101000000-000000000000

replace github.com/quotagate/quotagate => ../..

require github.com/valyala/fasthttp v1.69.0

require (
	github.com/andybalholm/brotli v1.2.0 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
)
