package redisstore

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/core"
)

// encodeReply builds a take script reply from outcomes (and undo records).
func encodeReply(now int64, out []core.Outcome, undo []undone) string {
	var b []byte
	b = appendInt(b, now)
	b2i := func(v bool) int64 {
		if v {
			return 1
		}
		return 0
	}
	for i, o := range out {
		flags := b2i(o.Allowed) | b2i(o.Charged)<<1
		if undo != nil {
			flags |= undo[i].added << 2
		}
		wait := o.RetryAfter.Microseconds()
		if o.Allowed {
			wait = o.Delay.Microseconds()
		}
		if o.Stamp != now { // a concurrency slot's id
			flags |= takenSlot
			wait = o.Stamp
		}
		b = appendInt(b, flags)
		b = appendInt(b, o.Remaining)
		b = appendInt(b, o.Reset.Microseconds())
		b = appendInt(b, wait)
		if undo != nil {
			b = appendInt(b, undo[i].remaining)
			b = appendInt(b, undo[i].reset)
		}
	}
	return string(b)
}

func TestParseTakeReply(t *testing.T) {
	in := []core.Outcome{
		{Allowed: true, Charged: true, Remaining: 999_999_999_999_998, Reset: time.Hour, Stamp: t0},
		{Remaining: 0, Reset: 3 * time.Second, RetryAfter: 2500 * time.Microsecond, Stamp: t0},
		{Allowed: true, Delay: 7 * time.Millisecond, Stamp: t0},
		{Allowed: true, Charged: true, Remaining: 3, Stamp: t0 + 2}, // a slot
	}
	undo := []undone{{5, 6, 1, t0}, {0, 0, 0, t0}, {1, 2, 0, t0}, {4, 0, 0, t0}}
	out := make([]core.Outcome, 4)
	if err := parseTakeReply(encodeReply(t0, in, nil), out, nil); err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if out[i] != in[i] {
			t.Errorf("item %d: %+v, want %+v", i, out[i], in[i])
		}
	}
	gotUndo := make([]undone, 4)
	if err := parseTakeReply(encodeReply(t0, in, undo), out, gotUndo); err != nil {
		t.Fatal(err)
	}
	for i := range undo {
		if gotUndo[i] != undo[i] {
			t.Errorf("undo %d: %+v, want %+v", i, gotUndo[i], undo[i])
		}
	}
	bad := []string{
		"",
		encodeReply(t0, in, nil)[:50],
		encodeReply(t0, in, nil) + "x",
		encodeReply(t0, []core.Outcome{{Remaining: -1}, {}, {}, {}}, nil),
		encodeReply(t0, in, []undone{{0, 0, 4, t0}, {}, {}, {}}),
		// A slot's id on an item not charged.
		encodeReply(t0, []core.Outcome{{Allowed: true, Stamp: t0 + 1}, {}, {}, {}}, nil),
	}
	for i, r := range bad {
		u := []undone(nil)
		if i == 4 {
			u = make([]undone, 4)
		}
		if err := parseTakeReply(r, out, u); err == nil {
			t.Errorf("bad reply %d accepted", i)
		}
	}
}

// FuzzParseTakeReply: any reply either parses into in-range outcomes or is
// rejected; it never panics, and a valid reply round-trips.
func FuzzParseTakeReply(f *testing.F) {
	f.Add([]byte(encodeReply(t0, []core.Outcome{{Allowed: true, Charged: true, Remaining: 4, Reset: time.Second}}, nil)), uint8(1), false)
	f.Add([]byte(encodeReply(t0, []core.Outcome{{RetryAfter: time.Second}, {Allowed: true}}, []undone{{1, 2, 1, t0}, {3, 4, 0, t0}})), uint8(2), true)
	f.Add([]byte("\x00\x01"), uint8(0), false)
	f.Fuzz(func(t *testing.T, reply []byte, n uint8, withUndo bool) {
		n %= 17
		out := make([]core.Outcome, n)
		var undo []undone
		if withUndo {
			undo = make([]undone, n)
		}
		err := parseTakeReply(string(reply), out, undo)
		if err != nil {
			return
		}
		per := replyPer
		if withUndo {
			per = replyPerUndo
		}
		if len(reply) != 8*(1+per*int(n)) {
			t.Fatalf("accepted %d bytes for %d items", len(reply), n)
		}
		for i, o := range out {
			if o.Remaining < 0 {
				t.Fatalf("item %d out of range: %+v", i, o)
			}
			if undo != nil && (undo[i].remaining < 0 || undo[i].added>>1 != 0) {
				t.Fatalf("undo %d out of range: %+v", i, undo[i])
			}
		}
		// Durations are whole microseconds, so a reply round-trips; a slot
		// whose id is the take's time reads as an item charged without
		// one, so compare what the re-encoded reply parses to.
		if got := encodeReply(le64(string(reply)), out, undo); got != string(reply) {
			out2, undo2 := make([]core.Outcome, n), []undone(nil)
			if withUndo {
				undo2 = make([]undone, n)
			}
			if err := parseTakeReply(got, out2, undo2); err != nil || !slices.Equal(out, out2) || !slices.Equal(undo, undo2) {
				t.Fatalf("round trip changed the reply: %v", err)
			}
		}
	})
}

// FuzzPartitionTag: a partition's tag never holds a brace, is bounded,
// keeps safe partitions as they are, and distinct partitions get distinct
// tags.
func FuzzPartitionTag(f *testing.F) {
	for _, s := range []string{"", "tenant:42", "2001:db8::1", "has space", "br{ace}", "}", strings.Repeat("a", 64), strings.Repeat("a", 65), "#abc", "ünï", "a\x00b"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ta, tb := partitionTag(a), partitionTag(b)
		for _, tag := range []string{ta, tb} {
			if strings.ContainsAny(tag, "{}") || len(tag) == 0 || len(tag) > maxRawPartition {
				t.Fatalf("bad tag %q", tag)
			}
		}
		if (ta == tb) != (a == b) {
			t.Fatalf("partitions %q and %q: tags %q and %q", a, b, ta, tb)
		}
		raw := ta == a
		if raw && (strings.HasPrefix(a, "#") || len(a) > maxRawPartition) {
			t.Fatalf("unsafe partition %q kept as it is", a)
		}
		if !raw && (len(ta) != 33 || ta[0] != hashedMark) {
			t.Fatalf("hashed tag %q", ta)
		}
		if partitionTag(a) != ta {
			t.Fatal("not deterministic")
		}
		k, s, e := buildKey("p:", a, "budget")
		if k[s:e] != ta || k[:s] != "p:{" || k[e:] != "}:budget" {
			t.Fatalf("key %q, tag at [%d:%d]", k, s, e)
		}
	})
}

// encodeBatchReply builds a take script reply for a run of several
// decisions: now, then each decision's items.
func encodeBatchReply(now int64, outs ...[]core.Outcome) string {
	r := encodeReply(now, nil, nil)
	for _, out := range outs {
		r += encodeReply(now, out, nil)[8:]
	}
	return r
}

func TestParseBatchReply(t *testing.T) {
	a := []core.Outcome{{Allowed: true, Charged: true, Remaining: 4, Reset: time.Second, Stamp: t0}}
	b := []core.Outcome{{RetryAfter: time.Second, Stamp: t0}, {Allowed: true, Remaining: 2, Stamp: t0}}
	batch := []*pending{{out: make([]core.Outcome, 1)}, {out: make([]core.Outcome, 2)}}
	if err := parseBatchReply(encodeBatchReply(t0, a, b), batch); err != nil {
		t.Fatal(err)
	}
	if batch[0].out[0] != a[0] || batch[1].out[0] != b[0] || batch[1].out[1] != b[1] {
		t.Errorf("parsed %+v %+v", batch[0].out, batch[1].out)
	}
	for _, bad := range []string{"", encodeBatchReply(t0, a), encodeBatchReply(t0, a, b, a), encodeBatchReply(t0, a, []core.Outcome{{Remaining: -1}, {}})} {
		if err := parseBatchReply(bad, batch); err == nil {
			t.Errorf("bad reply of %d bytes accepted", len(bad))
		}
	}
}

// FuzzParseBatchReply: a run's reply either parses into in-range outcomes
// for every decision, all stamped with the run's time, or is rejected; it
// never panics, and a valid reply round-trips.
func FuzzParseBatchReply(f *testing.F) {
	f.Add([]byte(encodeBatchReply(t0, []core.Outcome{{Allowed: true, Charged: true, Remaining: 4, Reset: time.Second}}, []core.Outcome{{RetryAfter: time.Second}, {Allowed: true}})), []byte{0, 1})
	f.Add([]byte(encodeBatchReply(t0, []core.Outcome{{Allowed: true, Delay: time.Millisecond}})), []byte{0})
	f.Add([]byte("\x00\x01"), []byte{3, 3})
	f.Fuzz(func(t *testing.T, reply []byte, sizes []byte) {
		if len(sizes) == 0 || len(sizes) > 16 {
			return
		}
		batch := make([]*pending, len(sizes))
		total := 0
		for i, n := range sizes {
			batch[i] = &pending{out: make([]core.Outcome, 1+int(n)%4)}
			total += len(batch[i].out)
		}
		if err := parseBatchReply(string(reply), batch); err != nil {
			return
		}
		if len(reply) != 8*(1+replyPer*total) {
			t.Fatalf("accepted %d bytes for %d items", len(reply), total)
		}
		now := le64(string(reply))
		outs := make([][]core.Outcome, len(batch))
		for i, p := range batch {
			for _, o := range p.out {
				// A concurrency slot's id (no earlier than now) takes the
				// stamp's place.
				if o.Remaining < 0 || o.Reset < 0 || o.RetryAfter < 0 || o.Delay < 0 || o.Stamp < now ||
					o.Stamp != now && !(o.Allowed && o.Charged) {
					t.Fatalf("decision %d: out of range %+v", i, o)
				}
			}
			outs[i] = p.out
		}
		// Encoded again and parsed, the outcomes are the same. (The bytes
		// may differ: a slot whose id is the run's time reads as a stamp.)
		again := make([]*pending, len(batch))
		for i, p := range batch {
			again[i] = &pending{out: make([]core.Outcome, len(p.out))}
		}
		if err := parseBatchReply(encodeBatchReply(now, outs...), again); err != nil {
			t.Fatalf("re-encoded reply refused: %v", err)
		}
		for i := range batch {
			if !slices.Equal(again[i].out, batch[i].out) {
				t.Fatalf("round trip changed decision %d: %+v, then %+v", i, batch[i].out, again[i].out)
			}
		}
	})
}
