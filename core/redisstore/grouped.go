package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotagate/quotagate/core"
	"github.com/redis/go-redis/v9"
)

// A group is the items of one Take or Refund whose keys live on one
// server: one hash slot (Cluster) or one hash tag (Ring). Each group is one
// script run; several groups run in one pipeline.
type group struct {
	keys []string
	args []any
	idx  []int // the items of the group, by index
	cmd  *redis.Cmd
	err  error
}

// groupItems computes the items' group into c.group (by the hash slot or
// the hash tag of their partition) and returns the number of groups.
func (s *Store) groupItems(c *call, items []core.Item) int {
	ng := 0
	var slots [maxItems]int
	var tags [maxItems]string
	for i := range items {
		it := &items[i]
		k, a, b := partitionKey(s.prefix, it.Key)
		tag, slot := k[a:b], 0
		if s.mode == modeCluster {
			slot = slotOf(tag)
		}
		g := 0
		for ; g < ng; g++ {
			if (s.mode == modeCluster && slots[g] == slot) || (s.mode != modeCluster && tags[g] == tag) {
				break
			}
		}
		if g == ng {
			slots[g], tags[g] = slot, tag
			ng++
		}
		c.group[i] = g
	}
	return ng
}

// makeGroups splits items into ng groups (by c.group), each with its keys
// and the arguments args makes of its items (encoded by enc) and its
// numbers of items and of keys.
func (s *Store) makeGroups(c *call, items []core.Item, ng int, args func(blob []byte, n, nk int) []any, enc encoder) []group {
	groups := make([]group, ng)
	for i := range items {
		g := c.group[i]
		groups[g].idx = append(groups[g].idx, i)
	}
	for g := range groups {
		var blob []byte
		groups[g].keys, blob = s.appendItems(nil, nil, items, groups[g].idx, enc)
		groups[g].args = args(blob, len(groups[g].idx), len(groups[g].keys))
	}
	return groups
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// runGroups runs fn once per group in one pipelined round trip: FCALL, or
// EVALSHA on servers without functions (see Store.run). Groups that fail
// because their server lacks the library or the script (a server
// restarted, failed over or flushed them) are retried once after loading
// it on every server; so are groups whose server refused FCALL as an
// unknown command, by EVALSHA. Each group's outcome is in its cmd and err.
// A group that fails without a reply makes a cluster client re-read the
// slot map (reloadAfter); a group Redis kept redirecting is run again, as
// Store.run does, while more than reserve of ctx's time is left.
func (s *Store) runGroups(ctx context.Context, fn *scriptFn, groups []group, reserve time.Duration) {
	pending := make([]int, len(groups))
	for g := range pending {
		pending[g] = g
	}
	redirects := 0
	for attempt := 0; ; attempt++ {
		pipe := s.client.Pipeline()
		functions := !s.noFunctions.Load()
		for _, g := range pending {
			if functions {
				groups[g].cmd = pipe.FCall(ctx, fn.name, groups[g].keys, groups[g].args...)
			} else {
				groups[g].cmd = pipe.EvalSha(ctx, fn.script.Hash(), groups[g].keys, groups[g].args...)
			}
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		var retry, bounced []int
		for _, g := range pending {
			err := groups[g].cmd.Err()
			if attempt == 0 && (isNoScript(err) || isFunctionMissing(err) || isUnknownCommand(err)) {
				if isUnknownCommand(err) {
					s.noFunctions.Store(true)
				}
				retry = append(retry, g)
				continue
			}
			if err != nil && s.cluster != nil && redirected(err) {
				bounced = append(bounced, g)
				continue
			}
			if err != nil {
				s.reloadAfter(err)
			}
			groups[g].err = err
		}
		if len(bounced) > 0 {
			if !pauseBeforeRetry(ctx, redirects, reserve) {
				for _, g := range bounced {
					groups[g].err = &resharding{err: groups[g].cmd.Err(), attempts: redirects + 1}
				}
				bounced = nil
			}
			redirects++
		}
		if len(retry) == 0 && len(bounced) == 0 {
			return
		}
		if len(retry) > 0 {
			if err := s.loadScripts(ctx); err != nil {
				for _, g := range retry {
					groups[g].err = fmt.Errorf("loading scripts: %w", err)
				}
				retry = nil
			}
		}
		pending = append(retry, bounced...)
		if len(pending) == 0 {
			return
		}
	}
}

// takeGrouped is Take on a Cluster or Ring. c holds no keys yet. Each
// group of items is one script run (in one pipeline); when one group
// denies or fails, the charges of the others are given back.
func (s *Store) takeGrouped(ctx context.Context, c *call, items []core.Item, out []core.Outcome) error {
	ng := s.groupItems(c, items)
	if ng == 1 {
		return s.takeOneGroup(ctx, c, items, out)
	}
	takeArgs := func(blob []byte, n, nk int) []any {
		return []any{appendOneCall(nil, true, n, nk, blob)}
	}
	groups := s.makeGroups(c, items, ng, takeArgs, func(b []byte, i int, name string, k, lk int) []byte {
		return appendTakeItem(b, &items[i], name, k, lk)
	})
	// A group Redis keeps redirecting is retried for at most half the
	// call's time: the other half is kept for giving back the other
	// groups' charges if it still fails.
	var reserve time.Duration
	if deadline, ok := ctx.Deadline(); ok {
		reserve = time.Until(deadline) / 2
	}
	s.runGroups(ctx, takeFn, groups, reserve)

	var undo [maxItems]undone
	errs := groupOutcomes(groups, out, undo[:])
	allowed := len(errs) == 0
	for i := 0; allowed && i < len(items); i++ {
		if !out[i].Allowed && !items[i].Shadow {
			allowed = false
		}
	}
	if allowed {
		return nil
	}
	if err := s.undoGroups(ctx, groups, items, out, undo[:]); err != nil {
		errs = append(errs, fmt.Errorf("undoing the charges of a denied take: %w", err))
	}
	if len(errs) > 0 {
		return storeError("take", errors.Join(errs...))
	}
	return nil
}

// takeOneGroup is takeGrouped when every item lives on one server: one
// call through s.run (FCALL, loading the library when the server lacks
// it, or EVALSHA on a server without functions).
func (s *Store) takeOneGroup(ctx context.Context, c *call, items []core.Item, out []core.Outcome) error {
	c.keys, c.blob = s.appendItems(c.keys, c.blob, items, nil, func(b []byte, i int, name string, k, lk int) []byte {
		return appendTakeItem(b, &items[i], name, k, lk)
	})
	c.args = append(c.args, appendOneCall(nil, false, len(items), len(c.keys), c.blob))
	reply, err := s.run(ctx, takeFn, c.keys, c.args...).Text()
	if err != nil {
		return storeError("take", err)
	}
	if err := parseTakeReply(reply, out[:len(items)], nil); err != nil {
		return storeError("take", err)
	}
	return nil
}

// groupOutcomes reads each group's reply into out and undo (what undoing
// each item needs), by item, and returns the errors of the groups that
// failed, which it also keeps in their err (their items' outcomes are
// not written).
func groupOutcomes(groups []group, out []core.Outcome, undo []undone) []error {
	var sub [maxItems]core.Outcome
	var subUndo [maxItems]undone
	var errs []error
	for g := range groups {
		gr := &groups[g]
		if gr.err == nil {
			var reply string
			if reply, gr.err = gr.cmd.Text(); gr.err == nil {
				gr.err = parseTakeReply(reply, sub[:len(gr.idx)], subUndo[:len(gr.idx)])
			}
		}
		if gr.err != nil {
			errs = append(errs, gr.err)
			continue
		}
		for j, i := range gr.idx {
			out[i], undo[i] = sub[j], subUndo[j]
		}
	}
	return errs
}

// undoGroups gives back the charges of the groups that answered, when
// another group denied or failed, so that the take charges nothing, and
// describes their charged items as if nothing had been charged, as the
// memory store does.
func (s *Store) undoGroups(ctx context.Context, groups []group, items []core.Item, out []core.Outcome, undo []undone) error {
	r := getCall()
	defer putCall(r)
	for g := range groups {
		if groups[g].err != nil {
			continue
		}
		for _, i := range groups[g].idx {
			if out[i].Charged {
				if items[i].Cost > 0 {
					r.items = append(r.items, items[i])
					r.sub = append(r.sub, out[i])
					r.undo = append(r.undo, undo[i].added)
				}
				out[i] = core.Outcome{Allowed: true, Remaining: undo[i].remaining,
					Reset: time.Duration(undo[i].reset) * time.Microsecond, Stamp: undo[i].now}
			}
		}
	}
	if len(r.items) == 0 {
		return nil
	}
	return s.refundGrouped(ctx, r)
}

// refundGrouped is Refund on a Cluster or Ring of c.items, c.sub and
// c.undo. c holds no keys yet.
func (s *Store) refundGrouped(ctx context.Context, c *call) error {
	items, outcomes := c.items, c.sub
	ng := s.groupItems(c, items)
	if ng == 1 {
		c.keys, c.blob = s.appendItems(c.keys, c.blob, items, nil, func(b []byte, i int, name string, k, lk int) []byte {
			return appendRefundItem(b, &items[i], &outcomes[i], c.undo[i], name, k, lk)
		})
		c.args = append(c.args, c.blob)
		if err := s.run(ctx, refundFn, c.keys, c.args...).Err(); err != nil {
			return storeError("refund", err)
		}
		return nil
	}
	refundArgs := func(blob []byte, n, nk int) []any { return []any{blob} }
	groups := s.makeGroups(c, items, ng, refundArgs, func(b []byte, i int, name string, k, lk int) []byte {
		return appendRefundItem(b, &items[i], &outcomes[i], c.undo[i], name, k, lk)
	})
	s.runGroups(ctx, refundFn, groups, 0)
	var errs []error
	for g := range groups {
		if groups[g].err != nil {
			errs = append(errs, groups[g].err)
		}
	}
	if len(errs) > 0 {
		return storeError("refund", errors.Join(errs...))
	}
	return nil
}
