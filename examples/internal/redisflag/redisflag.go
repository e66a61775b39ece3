// Package redisflag is the help text of the examples' -redis flag, whose
// value redisstore.ParseAddr reads.
package redisflag

// Usage is the -redis flag's help text, for flag.String and friends. Its
// back-quoted word is the value's name in -h output.
const Usage = "`Redis` that holds the budgets, shared by every instance; empty: in memory. One of:\n" +
	"  host:port                        one server (e.g. 127.0.0.1:6379)\n" +
	"  redis://[user:password@]host:port[/db]   one server, with password and database\n" +
	"  rediss://[user:password@]host:port[/db]  the same over TLS\n" +
	"  host:port,host:port,...          Redis Cluster: the addresses of some or all of its nodes\n" +
	"  redis[s]://[user:password@]host:port?addr=host:port&addr=host:port   Redis Cluster with password or TLS"
