// Package observe holds router-neutral observers for a quotagate engine
// ([core.Observer]) and the classification they share.
//
//   - [Classify], [DeniedBeforeStore] and [NearLimit] say what one budget did
//     in one decision: allowed, denied, shadow-denied (what a shadow budget
//     or a dry run would have denied), failed open or closed, or denied
//     before the store was called; and whether an allowed request used at
//     least a given share of its budget.
//   - [StoreLabels] names the store error kinds ([core.ErrorKind], which
//     the engine passes to [core.Observer.ObserveError]) for metrics.
//   - [Logger] writes denials, shadow denials, near-limit requests and
//     errors to a log/slog logger. Its output is itself rate-limited, per
//     kind of event, so a flood of requests cannot flood the logs; the
//     lines it suppresses are counted and the count is logged.
//   - [Series] and its table ([AllSeries], [DecisionsTotal], ...) define
//     every metric series once, name, help, kind, labels and buckets; the
//     exporters core/metrics (Prometheus) and core/otelmetrics
//     (OpenTelemetry) build their instruments from it and test that they
//     export it exactly.
//   - [Multi] fans one engine's events out to several observers, for
//     example a Logger and the Prometheus observer of package
//     core/metrics.
//
// No observer here ever sees or logs a partition key: results carry the
// budget's key class ("ip", "tenant", ...) instead. Client addresses are
// logged only when [LoggerConfig].ClientIP asks for it.
package observe
