// Package routers is the examples' one list of routers: the quickstart on
// each. The tests that run an example on every router
// (internal/quickstarts, internal/hostile) range over Quickstarts, so a
// new router's quickstart is one line here.
package routers

// Quickstarts are the directories, below examples/, of the quickstart on
// each router, net/http's first. Each serves the same budgets and routes
// (see examples/quickstart).
var Quickstarts = []string{"quickstart", "gin", "echo", "echov5", "fiber", "fiberv3"}
