package redisstore

import (
	"encoding/binary"
	"testing"
)

func leaseReplyBytes(v ...int64) []byte {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

// FuzzParseLeaseReply: any reply either parses into an in-range grant and
// outcome or is rejected; it never panics, never grants more than was
// asked, and a granted request is charged its cost.
func FuzzParseLeaseReply(f *testing.F) {
	f.Add(leaseReplyBytes(1_700_000_000_000_000, 1, 11, 500, 30_000, 0, 30_000), int64(1), int64(11))
	f.Add(leaseReplyBytes(1_700_000_000_000_000, 0, 0, 0, 30_000, 30_000, 0), int64(1), int64(11))
	f.Add(leaseReplyBytes(1, 1, 12, 0, 0, 0, 0), int64(1), int64(11))
	f.Add([]byte("\x00\x01"), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, reply []byte, cost, want int64) {
		r, err := parseLeaseReply(string(reply), cost, want)
		if err != nil {
			return
		}
		if len(reply) != 56 {
			t.Fatalf("accepted %d bytes", len(reply))
		}
		o := r.outcome
		if r.n < 0 || r.n > want || o.Remaining < 0 || o.Reset < 0 || o.RetryAfter < 0 || r.valid < 0 {
			t.Fatalf("out of range: %+v", r)
		}
		if o.Allowed && r.n < cost {
			t.Fatalf("allowed with %d units for a cost of %d", r.n, cost)
		}
		if o.Charged && (!o.Allowed || cost <= 0) {
			t.Fatalf("charged: %+v, cost %d", r, cost)
		}
	})
}
