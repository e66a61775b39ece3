// Package redisstore is a [core.Store] in Redis, so that every instance of
// a service behind a load balancer spends one budget.
//
// TODO: full package documentation.
package redisstore
