package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/quotagate/quotagate/core"
)

// Peek implements [core.Peeker]: it writes to out[i] what a cost-0 take of
// items[i] would report, and changes nothing on the server. It runs a
// function registered with Redis's no-writes flag, so the server refuses
// any write it would attempt: no key is created, no TTL moved, no sliding
// log entry or concurrency slot dropped. Items of one partition key take
// one round trip; each further key takes one more. Leased budgets are
// read from Redis only: units an instance holds in a lease count as
// spent.
func (s *Store) Peek(ctx context.Context, items []core.Item, out []core.Outcome) error {
	if len(out) < len(items) {
		return errors.New("redis store: peek: fewer outcomes than items")
	}
	for i := range items {
		it := items[i]
		it.Cost = 0
		if err := it.Validate(); err != nil {
			return storeError("peek", err)
		}
	}
	if err := core.CheckDistinct(items); err != nil {
		return storeError("peek", err)
	}
	rc := s.callContext(ctx)
	defer rc.release()
	ctx = rc
	// One run per partition key: a partition's keys share a hash slot, so
	// each run is valid on a cluster too.
	idx := make([]int, 0, len(items))
	done := make([]bool, len(items))
	for i := range items {
		if done[i] {
			continue
		}
		idx = idx[:0]
		for j := i; j < len(items) && len(idx) < maxItems; j++ {
			if !done[j] && items[j].Key == items[i].Key {
				idx = append(idx, j)
				done[j] = true
			}
		}
		if err := s.peekOne(ctx, items, idx, out); err != nil {
			return err
		}
	}
	return nil
}

// peekOne peeks at items[idx...], which share a partition key.
func (s *Store) peekOne(ctx context.Context, items []core.Item, idx []int, out []core.Outcome) error {
	keys, blob := s.appendItems(nil, nil, items, idx, func(b []byte, i int, name string, k, lk int) []byte {
		it := items[i]
		it.Cost = 0
		return appendTakeItem(b, &it, name, k, lk)
	})
	call := appendOneCall(nil, false, len(idx), len(keys), blob)
	reply, err := s.run(ctx, peekFn, keys, call).Text()
	if err != nil {
		return storeError("peek", err)
	}
	if want := 8 * (1 + replyPer*len(idx)); len(reply) != want {
		return storeError("peek", fmt.Errorf("malformed reply: %d bytes for %d items, want %d", len(reply), len(idx), want))
	}
	outs := make([]core.Outcome, len(idx))
	if err := parseOutcomes(reply[8:], le64(reply), outs, nil); err != nil {
		return storeError("peek", err)
	}
	for j, i := range idx {
		out[i] = outs[j]
	}
	return nil
}
