package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/redis/go-redis/v9"
)

// topologyCheckTimeout bounds the start-up check of [New]. It is longer
// than the store's per-call deadline: the check runs once, before any
// request waits on it, and on a loaded machine or a remote server a 50 ms
// deadline would skip it too often.
const topologyCheckTimeout = 2 * time.Second

// Fixes named by the topology errors.
const (
	fixUseCluster = "create the client with redis.NewClusterClient, or redis.NewUniversalClient with the addresses of the cluster's nodes"
	fixUseSingle  = "create the client with redis.NewClient (or redis.NewFailoverClient for Sentinel)"
)

// checkTopology asks the servers behind client whether they run in
// cluster mode (INFO cluster) and refuses a client that cannot work with
// what it finds:
//
//   - a single-node client (*redis.Client) or a Ring shard on a
//     cluster-enabled server: every key outside the node's own slots would
//     be answered MOVED, and every decision would fail;
//   - a *redis.ClusterClient on servers with cluster support disabled.
//
// Its errors wrap [core.ErrMisconfigured]. A server that cannot be asked (unreachable, INFO refused by an ACL or
// renamed) is not refused: the store works, or fails, as it would without
// the check, and a wrong topology found later is reported as a
// [core.ErrMisconfigured] store error (see [classify]).
func checkTopology(s *Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), topologyCheckTimeout)
	defer cancel()
	switch s.mode {
	case modeCluster:
		err := s.cluster.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
		if isClusterDisabled(err) {
			return fmt.Errorf("%w: redis store: the client is a cluster client, but the server has cluster support disabled (%v); %s", core.ErrMisconfigured, err, fixUseSingle)
		}
	case modeRing:
		var found []string
		_ = s.ring.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			if clusterEnabled(ctx, c) {
				found = append(found, c.Options().Addr)
			}
			return nil
		})
		if len(found) > 0 {
			return fmt.Errorf("%w: redis store: the client is a Ring, but its shard(s) %s run in cluster mode (INFO cluster: cluster_enabled:1), "+
				"where keys outside a node's own hash slots are answered MOVED; %s", core.ErrMisconfigured, strings.Join(found, ", "), fixUseCluster)
		}
	default:
		c, ok := s.client.(*redis.Client)
		if ok && clusterEnabled(ctx, c) {
			return fmt.Errorf("%w: redis store: the server at %s runs in cluster mode (INFO cluster: cluster_enabled:1), but the client is a single-node client, "+
				"which gets MOVED for every key outside that node's hash slots; %s", core.ErrMisconfigured, c.Options().Addr, fixUseCluster)
		}
	}
	return nil
}

// clusterEnabled reports whether the server of c says cluster_enabled:1.
// Any error (the server cannot be reached, INFO is not allowed) reports
// false: the check is then skipped.
func clusterEnabled(ctx context.Context, c *redis.Client) bool {
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil {
		return false
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_enabled:"); ok {
			return v == "1"
		}
	}
	return false
}

func isClusterDisabled(err error) bool {
	return err != nil && strings.Contains(err.Error(), "cluster support disabled")
}

// misconfigured is a store error caused by a wrong topology: a Redis reply
// that no retry will change while the client stays as it is. It wraps
// [core.ErrMisconfigured] and the reply.
type misconfigured struct {
	what string // what the reply means, and the fix
	err  error  // the reply
}

func (e *misconfigured) Error() string { return "misconfigured: " + e.what + ": " + e.err.Error() }

func (e *misconfigured) Unwrap() []error { return []error{core.ErrMisconfigured, e.err} }

// classify marks err as a configuration error when Redis answered MOVED,
// ASK or CROSSSLOT (the client does not match the server's cluster
// topology) or refused cluster commands (a cluster client on a server
// without cluster support), and as [context.DeadlineExceeded] when a
// connection timed out: go-redis sets a socket's deadline to the call's
// (ContextTimeoutEnabled), so the store's deadline often shows as a read
// or write timing out rather than as the context's error, and it is a
// store_timeout either way. Other errors are returned as they are.
//
// A *redis.ClusterClient follows MOVED and ASK itself; one that still
// returns them has run out of redirects, as while a slot is handed over in
// another order than Redis documents: the store retries the call and
// reports it as a [resharding], which classify leaves as it is.
func classify(err error) error {
	var r *resharding
	if err == nil || errors.Is(err, core.ErrMisconfigured) || errors.As(err, &r) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if isTimeout(err) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	var what string
	switch {
	case isMoved(err):
		what = "Redis answered MOVED: the server is a Redis Cluster node and the client does not follow the cluster's slots; " + fixUseCluster
	case isAsk(err):
		what = "Redis answered ASK: the server is a Redis Cluster node migrating a slot, and the client does not follow the cluster's slots; " + fixUseCluster
	case redis.HasErrorPrefix(err, "CROSSSLOT"):
		what = "Redis answered CROSSSLOT: the server is a Redis Cluster node and one script run held keys of several hash slots; " + fixUseCluster
	case isClusterDisabled(err):
		what = "the client is a cluster client, but the server has cluster support disabled; " + fixUseSingle
	default:
		return err
	}
	return &misconfigured{what: what, err: err}
}

// isTimeout reports whether err is a connection's read or write timing
// out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isMoved(err error) bool {
	_, ok := redis.IsMovedError(err)
	return ok || redis.HasErrorPrefix(err, "MOVED ")
}

func isAsk(err error) bool {
	_, ok := redis.IsAskError(err)
	return ok || redis.HasErrorPrefix(err, "ASK ")
}

// redirected reports whether a cluster client's call failed because Redis
// sent it elsewhere more times than the client follows (MaxRedirects,
// 3 by default), or asked it to try again (TRYAGAIN, a multi-key command
// on a slot being migrated): the script did not run, so running it again
// is safe. While a slot is handed over in an order other than the one
// Redis documents (the source told first, or MIGRATING before the target
// is IMPORTING), its two masters send its commands to each other until
// the operator's next step; go-redis gives up after its redirects.
func redirected(err error) bool {
	// The nil check first: go-redis's error tests allocate on every call.
	return err != nil && (isMoved(err) || isAsk(err) || redis.HasErrorPrefix(err, "TRYAGAIN"))
}

// maxRetryPause is the longest pause between two runs of a redirected
// call; the pauses double from 1 ms up to it.
const maxRetryPause = 16 * time.Millisecond

// maxRetriesWithoutDeadline bounds the runs of a redirected call whose
// context has no deadline (a Store with a negative Timeout): about a
// quarter of a second of pauses.
const maxRetriesWithoutDeadline = 20

// pauseBeforeRetry waits before run number attempt+2 of a redirected call
// and reports whether to make it: not when less than reserve would be left
// of ctx's time once the pause ends (reserve is kept for what the caller
// does after, such as giving back the charges of a call's other groups),
// or when ctx ends during the pause.
func pauseBeforeRetry(ctx context.Context, attempt int, reserve time.Duration) bool {
	pause := min(time.Millisecond<<min(attempt, 8), maxRetryPause)
	if deadline, ok := ctx.Deadline(); ok {
		if time.Until(deadline) <= pause+reserve {
			return false
		}
	} else if attempt >= maxRetriesWithoutDeadline {
		return false
	}
	return sleep(ctx, pause)
}

// resharding is the error of a cluster client's call that Redis kept
// redirecting (see redirected) until the call's time ran out: a slot is
// being handed over, and the call would likely succeed once that is
// done. It is a plain store error, not a misconfiguration.
type resharding struct {
	err      error // Redis's last reply
	attempts int   // runs of the call
}

func (e *resharding) Error() string {
	return fmt.Sprintf("a hash slot is being handed over: Redis kept redirecting the call (%d runs within the store's deadline, each through the client's own redirects): %v", e.attempts, e.err)
}

func (e *resharding) Unwrap() error { return e.err }
