// Package tenantapi is the policy of the Tenant API example: a multi-tenant
// API's published rate-limit contract expressed with quotagate, shared by
// one main per router (nethttp, gin, echo and fiber in the directories
// below this one).
//
// The contract, in short (README.md has the full tables):
//
//   - five per-tenant budgets, fixed one-minute windows: t_mutate 300
//     (ignores GET, HEAD and OPTIONS, on every /api route), t_heavy 30,
//     t_values 600, t_check 10 and t_outbound 5, each scaled by the
//     tenant's licence tier (small ¼, medium ½, large 1, xl 2, max 4),
//     rounded up;
//   - flat per-(tenant, operator) budgets on sensitive endpoints
//     (card_timeline 20, credential_issue 5), a flat per-subscriber portal
//     budget (60), and per-client-IP public budgets, one per endpoint, set
//     from the environment;
//   - a 429 with the API's own JSON body and a fresh request id, and no
//     Retry-After or rate-limit header fields on any response.
//
// [New] reads the policy (policy.yaml, embedded, with its environment
// overrides) and builds the engine; [API.Routes] gives each route its
// layer; [Authenticate] is the example's authentication, which each main
// runs before the budgets; [Main] is the whole main function: flags,
// store, listening line, signals.
package tenantapi
