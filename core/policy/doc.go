// Package policy resolves budget quotas per key and loads budgets from a
// declarative configuration.
//
// # Quota resolution
//
// A budget's quota can be the same for every key ([Flat]) or resolved per
// key from the subject the key belongs to (a tenant, an organisation), as
// its [QuotaBy] (quota_by in a file) says:
//
//   - [ByTier]: the subject's tier gives its whole quota: the tier's own
//     quota ("pro: 1000/min"), or the budget's reference quota × the tier's
//     share, rounded up, never below 1, with exact integer arithmetic
//     ([Share.Scale]: 300 at 25% is 75, 5 at 25% is 2). The tier is the one
//     an operator pinned, or the one derived from the licence's capacity
//     ([Tiers.Of]).
//   - [ByPlan]: the subject's plan adds an increment to the budget's base
//     quota: base + the plan's increase.
//   - An override in the subject for a budget replaces base and plan (or
//     the tier's quota).
//
// So a price list's "plan free 60/min, pro 600/min", where each customer
// gets the quota outright, is written as tiers, with the subjects section
// saying who is in which:
//
//	# tier: a subject's whole quota (free: 60/min), or a share of the budget's quota (25%)
//	# plan: an increment added to a budget's base quota (plans: {pro: {api: 540}})
//	tiers:
//	  free: 60/min
//	  pro: 600/min
//	tier_fallback: free        # every tenant not listed below
//	subjects:
//	  acme: pro
//	budgets:
//	  api: {window: 1m, key: tenant, quota_by: tier}
//
// Plans suit quotas that grow from one base, an add-on or a negotiated
// increase; the same two quotas as a base and an increment:
//
//	plans:
//	  pro: {api: 540}            # base 60 + 540: 600 a minute
//	subjects:
//	  acme: {plan: pro}          # a tenant not listed gets the base
//	budgets:
//	  api: {quota: 60, window: 1m, key: tenant, quota_by: plan}
//
// The policy file can say who a key belongs to (its subjects section, see
// below: [Resolver].Assigned), or the application can, with a
// [LookupFunc]; a bounded [Subjects] cache (size, TTL, one lookup per key however many requests
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
// [Load] and [Parse] read budgets, tiers, plans, subjects and layers from
// YAML or JSON, validate everything, and report every problem with its
// location (file:line:column in YAML, a JSONPath in JSON), in document
// order. Key functions are named
// in the document and supplied by the caller ([LoadConfig.Keys]). Any value
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
//	    quota_by: tier         # the tenant's tier gives its quota: here 300 × the tier's share
//	    ignore_methods: [GET, HEAD, OPTIONS]
//	  public_login:
//	    quota: {env: PUBLIC_RATE_LIMIT, default: 20}
//	    window: {env: PUBLIC_RATE_WINDOW, default: 1m}
//	    key: ip
//	    failure_mode: closed
//	layers:
//	  writes: {use: [t_mutate]}
//
// A complete file for an API whose tenants get quotas by tier, with the
// tiers as plain quotas and the tenants assigned in the same file (no
// lookup function needed; examples/tiers serves it with Echo):
//
//	tiers:
//	  free: 100/min
//	  pro: 1000/min
//	  enterprise: 10000/min
//	tier_fallback: free        # tenants not listed below
//	subjects:
//	  acme: pro
//	  globex: enterprise
//	  initech: {tier: pro, overrides: {api: 5000}}
//	budgets:
//	  api: {window: 1m, key: tenant, quota_by: tier}
//
// A tier is a quota ("100/min", see [ParseRate]), the same for every
// by-tier budget counting in that window, or a share of each budget's
// reference quota ("25%"). Written as a bare value, a tier is assigned
// only (pinned_only); the mapping form may derive it from a licence's cap
// (up_to). A by-tier budget may leave its quota out when tier_fallback
// is a quota tier: it then falls back to that tier's quota.
//
// A subject is a key as its budget's subject key function returns it (a
// tenant, a subscriber, a hashed API key: the hash, keyfunc.Hasher.Sum of
// the key, so no secret goes in the file). A subject the file does not list is looked up through
// LoadConfig.Subjects when one is given; otherwise it has no plan and is in
// tier_fallback (or the tier derived for a cap of 0). So is a listed
// subject given neither a tier nor a cap. The subjects reload with the
// rest of the file.
//
// The document's fields:
//
//	budgets:                  # required; name → budget
//	  <name>:
//	    algorithm: fixed_window | sliding_window | sliding_log | token_bucket | leaky_bucket | concurrency
//	    quota: <int>          # the reference (tier) or base (plan) quota; required
//	                          # unless quota_by tier with a quota tier as tier_fallback
//	    window: <duration>    # required, but not for concurrency; "1m", "60s", "500ms"
//	    lease: <duration>     # concurrency only, and required there: how long a
//	                          # slot held in Redis counts at most (core.Concurrency)
//	    burst: <int>          # token_bucket and leaky_bucket only
//	    max_wait: <duration>  # leaky_bucket only, and required there
//	    key: <name>           # required; a name in LoadConfig.Keys
//	    key_class: <string>   # for observers; default: the key's name
//	    missing_key: deny | skip | fallback
//	    fallback_key: <name>  # with missing_key: fallback
//	    ignore_methods: [GET, HEAD, OPTIONS]
//	    quota_by: flat | tier | plan  # one quota for every key (default), the subject's
//	                          # tier's, or base + its plan's increase (formerly scaling)
//	    subject: <name>       # key function whose key is looked up (default: key)
//	    shadow: <bool>
//	    failure_mode: inherit | open | closed | local
//	    leasing: {max: <int>, ttl: <duration>}  # core.Lease, hot keys in Redis: fixed_window, sliding_window, token_bucket
//	    scale:                # lowers the quota with load or on a schedule (core/scale)
//	      signal: <name>      # a name in LoadConfig.Signals, with:
//	      target: <number>    # the signal's value to keep the load at: 70% | 0.7 | 20
//	      min: <share>        # the lowest scale the signal sets; default 25%
//	      step: <share>       # the most one update moves it; default 5%
//	      deadband: <share>   # how far off target's scale it must be to move; default 5%, 0 for none
//	      above: <share>      # threshold rule: this scale while the signal is above target, else 1
//	      interval: <duration> # between updates; default 500ms
//	      schedule:           # period → scale, the lowest of those in force
//	        "<days> <HH:MM>-<HH:MM>": <share>   # "Mon-Fri 09:00-18:00": 50%
//	      zone: <IANA name>   # the schedule's time zone; default UTC
//	    description: <string> # ignored
//	tiers:                    # name → tier: a subject's whole quota, or share of the reference
//	  <name>: <int>/<window>  # a quota, assigned only: 100/min, 5000/hour, 10/s, 300/5m
//	  <name>: <share>         # a share, assigned only: 25% | 0.25 | 1/4
//	  <name>: {share: <share> | quota: <int>/<window>, up_to: <int>, pinned_only: <bool>}
//	tier_fallback: <tier>     # when a subject's tier cannot be resolved, and for
//	                          # subjects the file does not list
//	subjects:                 # key → what the file says about it
//	  <key>: <tier>
//	  <key>: {tier: <tier>, plan: <plan>, cap: <int> | none, overrides: {<budget>: <int>}}
//	plans:                    # plan → budget → increase added to its base quota
//	  <plan>: {<budget>: <int>}
//	layers:                   # name → the budgets a middleware applies
//	  <name>:
//	    use: [<budget>, ...]  # required, unless adaptive is set
//	    cost: <int>
//	    costs: {<budget>: <int>}
//	    adaptive:             # an adaptive concurrency limit (core/adaptive)
//	      name: <string>      # default: the layer's name
//	      initial: <int>      # limit before the first update; default 4
//	      min: <int>          # default 1
//	      max: <int>          # default 1000
//	      tolerance: <share>  # 125% (default): latency over no-load latency
//	      smoothing: <share>  # 0.5 (default)
//	      samples: <int>      # samples per update; default 10
//	      sample_every: <int> # time one request in n; default 4
//	      normal_share: <share>     # of the limit; default 90%
//	      sheddable_share: <share>  # default 50%
//	      max_retry_after: <duration> # default 10s
//	      priority: <name>    # a name in LoadConfig.Priorities
//	      signal: <name>      # a name in LoadConfig.Signals, with:
//	      target: <number>    # the signal's value to keep the load at
//
// Any value above may be written {env: NAME} or {env: NAME, default: VALUE}.
//
// A budget's scaling, the old name of quota_by, is read as quota_by until
// the next release, with a warning at each load through
// [LoadConfig.Logger]; a budget giving both is a problem.
//
// A budget's scale section needs a signal and its target, or a schedule,
// or both; the budget's [scale.Controller] is [Document.Scale]. Signals
// are functions the program gives in LoadConfig.Signals, as for adaptive
// limits.
//
// A [Reloader] re-reads the file (on SIGHUP, say) and swaps the engine's
// whole policy atomically with core.Engine.Reload. A budget whose scale
// section is unchanged keeps its Controller, and so its current scale,
// across the reload; a changed or new section starts at full scale.
//
// # Calculator
//
// [Calculate] turns a quota and a window into the minimum spacing between
// requests, the sustained rate, a suggested burst and the Retry-After to
// publish.
package policy
