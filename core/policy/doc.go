// Package policy resolves budget quotas per key and loads budgets from a
// declarative configuration.
//
// # Quota resolution
//
// A budget's quota can be the same for every key ([Flat]) or resolved per
// key from the subject the key belongs to (a tenant, an organisation):
//
//   - [TierScaled]: reference quota × the share of the subject's licence
//     tier, rounded up, never below 1, with exact integer arithmetic
//     ([Share.Scale]: 300 at 25% is 75, 5 at 25% is 2). The tier is the one
//     an operator pinned, or the one derived from the licence's capacity
//     ([Tiers.Of]).
//   - [PlanScaled]: base quota + the increase of the subject's plan.
//   - An override in the subject for a budget replaces base and plan (or
//     the tier-scaled quota).
//
// The application says who a key belongs to with a [LookupFunc]; a bounded
// [Subjects] cache (size, TTL, one lookup per key however many requests
// miss together) keeps lookups off the hot path. A change takes effect at
// the next request after [Subjects.Invalidate], or within the TTL. The
// stores never embed the quota: state is read against the quota in force,
// so for the window algorithms raising a quota mid-window admits more at
// once and lowering it denies at once. A token bucket stores time, not a
// count; with the default burst its spent fraction carries over and it
// refills at the new rate.
//
// [Resolver.QuotaFunc] returns the core.QuotaFunc of a budget; when
// resolution fails the engine applies the budget's static Quota (the
// reference or base) and reports the error, unless the tier table has a
// fallback tier.
//
// # Configuration
//
// [Load] and [Parse] read budgets, tiers, plans and layers from YAML or
// JSON, validate everything, and report every problem with its location
// (file:line:column in YAML, a JSONPath in JSON). Key functions are named
// in the document and supplied by the caller ([Options.Keys]). Any value
// may come from the environment: {env: PUBLIC_RATE_LIMIT, default: 20}. A
// variable that is set but invalid or empty, or unset without a default,
// stops loading with an error naming the variable; it never falls back
// silently.
//
//	tiers:
//	  small:  {share: 25%, up_to: 100}
//	  medium: {share: 50%, up_to: 1000}
//	  large:  {share: 100%, up_to: 10000}
//	  xl:     {share: 200%}                  # larger caps, and no cap
//	  max:    {share: 400%, pinned_only: true}
//	budgets:
//	  t_mutate:
//	    quota: 300
//	    window: 1m
//	    key: tenant
//	    scaling: tier
//	    ignore_methods: [GET, HEAD, OPTIONS]
//	  public_login:
//	    quota: {env: PUBLIC_RATE_LIMIT, default: 20}
//	    window: {env: PUBLIC_RATE_WINDOW, default: 1m}
//	    key: ip
//	    failure_mode: closed
//	layers:
//	  writes: {use: [t_mutate]}
//
// The document's fields:
//
//	budgets:                  # required; name → budget
//	  <name>:
//	    algorithm: fixed_window | sliding_window | sliding_log | token_bucket | leaky_bucket
//	    quota: <int>          # required; the reference (tier) or base (plan) quota
//	    window: <duration>    # required; "1m", "60s", "500ms"
//	    burst: <int>          # token_bucket and leaky_bucket only
//	    max_wait: <duration>  # leaky_bucket only, and required there
//	    key: <name>           # required; a name in Options.Keys
//	    key_class: <string>   # for observers; default: the key's name
//	    missing_key: deny | skip | fallback
//	    fallback_key: <name>  # with missing_key: fallback
//	    ignore_methods: [GET, HEAD, OPTIONS]
//	    scaling: flat | tier | plan
//	    subject: <name>       # key function whose key is looked up (default: key)
//	    shadow: <bool>
//	    failure_mode: inherit | open | closed | local
//	    lease: {max: <int>, ttl: <duration>}  # core.Lease: fixed_window, sliding_window, token_bucket
//	    description: <string> # ignored
//	tiers:                    # name → tier
//	  <name>: {share: 25% | 0.25 | 1/4, up_to: <int>, pinned_only: <bool>}
//	tier_fallback: <tier>     # when a subject's tier cannot be resolved
//	plans:                    # plan → budget → increase
//	  <plan>: {<budget>: <int>}
//	layers:                   # name → the budgets a middleware applies
//	  <name>: {use: [<budget>, ...], cost: <int>, costs: {<budget>: <int>}}
//
// Any value above may be written {env: NAME} or {env: NAME, default: VALUE}.
//
// A [Reloader] re-reads the file (on SIGHUP, say) and swaps the engine's
// whole policy atomically with core.Engine.Reload.
//
// # Calculator
//
// [Calculate] turns a quota and a window into the minimum spacing between
// requests, the sustained rate, a suggested burst and the Retry-After to
// publish.
package policy
