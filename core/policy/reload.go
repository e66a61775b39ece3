package policy

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/quotagate/quotagate/core"
)

// Reloader re-reads a configuration file and swaps an engine's whole
// policy atomically with core.Engine.Reload: every budget, with the quota
// resolution of the new tiers and plans, at once. Requests already being
// decided finish under the policy they started with; the counters of
// budgets whose name, algorithm and window are unchanged carry over (a
// changed quota applies to the existing count at the next request), and
// so does the scale of a budget whose scale section is unchanged (its
// core/scale Controller is kept).
//
// A configuration with any problem, or one whose layers differ from the
// running ones (layers are fixed when they are created), changes nothing:
// the running policy stays in force and Reload returns the reason.
type Reloader struct {
	eng  *core.Engine
	path string
	opts LoadConfig
	mu   sync.Mutex
	cur  atomic.Pointer[Document]
}

// NewReloader returns a Reloader of eng, whose budgets came from current,
// loaded from path with opts.
func NewReloader(eng *core.Engine, path string, opts LoadConfig, current *Document) *Reloader {
	r := &Reloader{eng: eng, path: path, opts: opts}
	r.cur.Store(current)
	return r
}

// Current returns the configuration in force.
func (r *Reloader) Current() *Document { return r.cur.Load() }

// Reload re-reads the file and applies it (see Apply). Concurrent reloads
// run one after the other, so the last one applies the latest file.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, err := Load(r.path, r.opts)
	if err != nil {
		return err
	}
	return r.apply(cfg)
}

// Apply swaps the engine's policy for cfg's. It fails, changing nothing,
// when cfg's layers differ from the running configuration's or the engine
// rejects cfg's budgets (for example a budget a layer uses was removed).
func (r *Reloader) Apply(cfg *Document) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.apply(cfg)
}

func (r *Reloader) apply(cfg *Document) error {
	if cur := r.cur.Load(); cur != nil {
		if what, same := cur.sameLayers(cfg); !same {
			return fmt.Errorf("policy: %s: %s changed; layers are fixed at start-up, restart to change them (nothing was reloaded)", cfg.file, what)
		}
	}
	if cur := r.cur.Load(); cur != nil {
		cfg.keepScales(cur)
	}
	if err := r.eng.Reload(cfg.Budgets()); err != nil {
		return fmt.Errorf("policy: %s: %w", cfg.file, err)
	}
	if cur := r.cur.Load(); cur != nil {
		cfg.keepGuards(cur)
	}
	r.cur.Store(cfg)
	return nil
}

// Watch reloads on every value received from signals (typically
// signal.Notify(ch, syscall.SIGHUP)) until ctx ends, passing each
// outcome (nil on success) to report.
func (r *Reloader) Watch(ctx context.Context, signals <-chan os.Signal, report func(error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-signals:
			if !ok {
				return
			}
			err := r.Reload()
			if report != nil {
				report(err)
			}
		}
	}
}
