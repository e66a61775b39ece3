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
		cmd   *redis.Cmd
	}
	runs := make([]slotRun, 0, len(batch))
	for i := 0; i < len(batch); {
		j := i + 1
		for j < len(batch) && batch[j].slot == batch[i].slot {
			j++
		}
		r := slotRun{group: batch[i:j], bb: batchBufPool.Get().(*batchBuf)}
		r.keys, r.arg = r.bb.appendRun(r.group)
		runs = append(runs, r)
		i = j
	}
	direct := !s.noFunctions.Load() && !s.refusing.Load()
	if direct {
		pipe := b.node.Pipeline()
		for i := range runs {
			r := &runs[i]
			a := append(r.bb.args[:0], "fcall", takeFn.nameArg, len(r.keys))
			for _, k := range r.keys {
				a = append(a, k)
			}
			a = append(a, r.arg)
			r.bb.args = a
			r.cmd = redis.NewCmd(ctx, a...)
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
			clear(r.bb.args) // hold no keys in the pool
			r.bb.args = r.bb.args[:0]
			if isUnknownCommand(err) || isFunctionMissing(err) || redirected(err) {
				// The script did not run: run it again the lone way.
				reply, err = s.runTake(ctx, r.keys, r.arg, &r.bb.args)
			} else {
				s.reloadAfter(err)
			}
		} else {
			reply, err = s.runTake(ctx, r.keys, r.arg, &r.bb.args)
		}
		if answered(err) {
			b.noteAnswered()
		}
		if err == nil {
			err = parseBatchReply(reply, r.group)
		}
		if err != nil {
			ok = false
			err = storeError("take", err)
			for _, p := range r.group {
				p.err = err
			}
		}
		r.bb.batch = r.bb.batch[:0] // the group is batch's; putBatchBuf must not clear it
		putBatchBuf(r.bb)
	}
	return ok
}

// appendRun builds in bb the keys and the argument of one take script run
// of the decisions of group, as runBatch does for a batch.
func (bb *batchBuf) appendRun(group []*pending) ([]string, []byte) {
	if len(group) == 1 {
		p := group[0]
		p.call = appendOneCall(p.call[:0], false, len(p.out), len(p.keys), p.blob)
		return p.keys, p.call
	}
	for _, p := range group {
		bb.keys = append(bb.keys, p.keys...)
		bb.counts = append(bb.counts, byte(len(p.out)))
		bb.kcounts = append(bb.kcounts, byte(len(p.keys)))
	}
	bb.blob = appendCall(bb.blob, false, bb.counts, bb.kcounts)
	for _, p := range group {
		bb.blob = append(bb.blob, p.blob...)
	}
	return bb.keys, bb.blob
}
