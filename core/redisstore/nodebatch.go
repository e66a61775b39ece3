package redisstore

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
)

// oneSlot reports whether every Take of batch lies in one hash slot.
func oneSlot(batch []*pending) bool {
	for _, p := range batch[1:] {
		if p.slot != batch[0].slot {
			return false
		}
	}
	return true
}

// runNodeBatch runs the decisions of batch, Takes that b's cluster master
// holds in several hash slots: one take script run per slot (a script may
// touch the keys of one slot only), the slots' runs pipelined to the
// master in one round trip. Within a slot the decisions keep their queue
// order. A slot's run that the master redirects (the slot moved) or that
// finds no function library, and every run when the store runs scripts
// by EVALSHA or refuses calls, goes through runTake instead, which follows
// the cluster, loads the library and refuses as a lone run does. It
// reports whether every run answered.
func (s *Store) runNodeBatch(ctx context.Context, b *batcher, batch []*pending) bool {
	slices.SortStableFunc(batch, func(x, y *pending) int { return x.slot - y.slot })
	type slotRun struct {
		group []*pending
		bb    *batchBuf
		keys  []string
		arg   []byte
		args  *[]any
		cmd   *redis.Cmd
	}
	runs := make([]slotRun, 0, len(batch))
	for i := 0; i < len(batch); {
		j := i + 1
		for j < len(batch) && batch[j].slot == batch[i].slot {
			j++
		}
		r := slotRun{group: batch[i:j], bb: batchBufPool.Get().(*batchBuf)}
		r.keys, r.arg, r.args = runArgs(r.bb, r.group)
		runs = append(runs, r)
		i = j
	}
	direct := !s.noFunctions.Load() && !s.refusing.Load()
	if direct {
		pipe := b.node.Pipeline()
		for i := range runs {
			r := &runs[i]
			a := append((*r.args)[:0], "fcall", takeFn.nameArg, len(r.keys))
			for _, k := range r.keys {
				a = append(a, k)
			}
			*r.args = append(a, r.arg)
			r.cmd = redis.NewCmd(ctx, *r.args...)
			_ = pipe.Process(ctx, r.cmd)
		}
		_, _ = pipe.Exec(ctx)
	}
	ok := true
	for i := range runs {
		r := &runs[i]
		var reply string
		var err error
		if direct {
			reply, err = r.cmd.Text()
			clear(*r.args) // hold no keys in the pool
			*r.args = (*r.args)[:0]
			if isUnknownCommand(err) || isFunctionMissing(err) || redirected(err) {
				// The script did not run: run it again the lone way.
				reply, err = s.runTake(ctx, nil, r.keys, r.arg, r.args)
			} else {
				s.reloadAfter(err)
			}
		} else {
			reply, err = s.runTake(ctx, nil, r.keys, r.arg, r.args)
		}
		if !settleRun(b, r.group, reply, err) {
			ok = false
		}
		r.bb.batch = r.bb.batch[:0] // the group is batch's; putBatchBuf must not clear it
		putBatchBuf(r.bb)
	}
	return ok
}
