package main

import (
	"strings"
	"testing"
	"time"
)

// TestScaledQuotasHoldTheQueue runs a short demonstration and checks its
// outcomes, not its timing: during the load the scale and the quota the
// clients are told fall; no request of a paced client ends refused (429)
// or turned away (503); once the load ends the scale is back at 1 and the
// full quota is announced.
//
// An attempt may meet a 429 on the wire when the scale falls between the
// answer that told its client what it had left and the attempt that
// spends the last of it (a step takes up to a step's worth of what a
// client was told); its pacer waits the Retry-After and sends it again.
// Such attempts are rare, and must stay so: at most 1% of the load's. Out
// of the load a phase has few attempts, and its 429s are held to what its
// falls can cause: per Step fallen, each client's attempts in flight when
// it fell and those sent on the answers then on their way, 2 × InFlight
// (none when the scale did not fall). The scale can go on falling for a
// moment after the load ends, while the queue the load left drains.
//
// An attempt may likewise find the queue full during the load although
// every client keeps its quota: the clients can have Peak × InFlight
// attempts out at once (48), more than the queue and the workers hold
// (44), and on a machine busy enough that the controller sits at its Min
// a burst of them can meet at the queue. Its pacer waits the Retry-After
// and sends it again, so no request fails; such attempts must stay at
// most 1% of the load's, and none outside it.
func TestScaledQuotasHoldTheQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("about 15s of load over real HTTP")
	}
	p := defaults()
	p.Calm, p.Load, p.After = 2*time.Second, 8*time.Second, 5*time.Second
	res, err := run(p)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	res.print(&out)
	t.Log("\n" + out.String())

	if res.Load.LowestScale >= 1 || res.Load.LowestQuota >= p.Quota || res.Load.LowestQuota == 0 {
		t.Errorf("during the load: lowest scale %v, lowest quota announced %d; want both below full (1, %d)", res.Load.LowestScale, res.Load.LowestQuota, p.Quota)
	}
	for _, row := range []phaseRow{res.Calm, res.Load, res.After} {
		if row.Failed != 0 {
			t.Errorf("%s: %d requests failed; want none", row.Name, row.Failed)
		}
		if row.Served == 0 {
			t.Errorf("%s: nothing served", row.Name)
		}
	}
	if res.Calm.Unavailable != 0 || res.After.Unavailable != 0 {
		t.Errorf("attempts found the queue full (503) outside the load: %d calm, %d after", res.Calm.Unavailable, res.After.Unavailable)
	}
	if 100*res.Load.Unavailable > res.Load.Sent {
		t.Errorf("during the load: %d of %d attempts found the queue full (503), want at most 1%%", res.Load.Unavailable, res.Load.Sent)
	}
	if 100*res.Load.TooMany > res.Load.Sent {
		t.Errorf("during the load: %d of %d attempts met a 429, want at most 1%%", res.Load.TooMany, res.Load.Sent)
	}
	for _, ph := range []struct {
		row     phaseRow
		clients int
	}{{res.Calm, p.Few}, {res.After, p.Last}} {
		if most := int64(ph.row.Falls * ph.clients * 2 * p.InFlight); ph.row.TooMany > most {
			t.Errorf("%s: %d attempts met a 429, the scale fell %d Steps; want at most %d (2 × %d in flight for each of %d clients, per Step)",
				ph.row.Name, ph.row.TooMany, ph.row.Falls, most, p.InFlight, ph.clients)
		}
	}
	if res.After.Scale != 1 || res.After.Quota != p.Quota {
		t.Errorf("after the load: scale %v, quota announced last %d; want 1 and %d", res.After.Scale, res.After.Quota, p.Quota)
	}
}
