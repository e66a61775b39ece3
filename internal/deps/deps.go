// Package deps pins the project's dependencies while the packages that use
// them are being written. It is removed once they are.
package deps

import (
	_ "github.com/dunglas/httpsfv"
	_ "github.com/gin-gonic/gin"
	_ "github.com/gofiber/fiber/v2"
	_ "github.com/hashicorp/go-retryablehttp"
	_ "github.com/labstack/echo/v4"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "go.yaml.in/yaml/v3"
)
