package admission

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Thousands of requests admitted, cancelled, timed out, refused, routed,
// failed and panicked through, concurrently with reloads and kicks: when the
// dust settles, every queue, credit, in-flight count and gauge is back to 0.
func TestStressConcurrentAdmissionsAndCompletions(t *testing.T) {
	fleet := newSlots(16)
	names := []string{"a", "b", "c"}
	cfg := Config{
		Mode:                 ModeEnforce,
		Partitions:           []Partition{{Name: "a", Weight: 1}, {Name: "b", Weight: 2}, {Name: "c", Weight: 3}},
		DefaultPartition:     "a",
		MaxQueuePerPartition: 600,
		QueueTimeout:         150 * time.Millisecond,
		CreditTTL:            time.Second,
	}
	s, _ := newScheduler(t, cfg, fleet, SystemClock)

	var credits, refused, gaveUp atomic.Int64
	handle := func(rng *rand.Rand, c *Credit) {
		credits.Add(1)
		switch rng.IntN(5) {
		case 0: // routing failed: the credit comes straight back
			c.Release(OutcomeFailure, 0)
		case 1: // a handler panics after routing; the middleware recovers
			func() {
				defer func() { _ = recover() }()
				defer fleet.finish(c, 1)
				fleet.route(c)
				panic("boom")
			}()
		default:
			fleet.route(c)
			if p, err := c.Redeem(c.RequestID(), c.Model(), c.Partition()); err == nil {
				_ = p.Claim()
			}
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			fleet.finish(c, c.Cost())
			c.Release(OutcomeSuccess, c.Cost()) // a second release is a no-op
		}
	}
	expected := func(err error) bool {
		return errors.Is(err, ErrQueueFull) || errors.Is(err, ErrQueueTimeout) ||
			errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	}

	stop := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() { // reloads and telemetry kicks while traffic flows
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			cfg.Partitions[i%3].Weight = float64(1 + i%4)
			assert.NoError(t, s.Reconfigure(cfg))
			s.Kick()
		}
	})

	const n = 4000
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			r := Request{ID: fmt.Sprint(i), Model: "m", Partition: names[rng.IntN(3)], Cost: 1 + rng.IntN(2000)}
			ctx := context.Background()
			switch rng.IntN(4) {
			case 0:
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(5000))*time.Microsecond)
				defer cancel()
			case 1:
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(time.Duration(rng.IntN(5000))*time.Microsecond, cancel)
				defer cancel()
			}
			if rng.IntN(4) == 0 { // the event-loop API, cancelled at random
				results := make(chan struct {
					c   *Credit
					err error
				}, 1)
				tk := s.Submit(r, func(c *Credit, err error) {
					results <- struct {
						c   *Credit
						err error
					}{c, err}
				})
				if tk != nil && rng.IntN(2) == 0 {
					time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
					if tk.Cancel() {
						gaveUp.Add(1)
						return
					}
				}
				res := <-results
				if res.err != nil {
					assert.True(t, expected(res.err), "%v", res.err)
					refused.Add(1)
					return
				}
				handle(rng, res.c)
				return
			}
			c, err := s.Admit(ctx, r)
			if err != nil {
				assert.True(t, expected(err), "%v", err)
				if ctx.Err() != nil {
					gaveUp.Add(1)
				} else {
					refused.Add(1)
				}
				return
			}
			handle(rng, c)
		})
	}
	wg.Wait()
	close(stop)
	chaos.Wait()

	t.Logf("credits %d, refused %d, gave up %d", credits.Load(), refused.Load(), gaveUp.Load())
	assert.EqualValues(t, n, credits.Load()+refused.Load()+gaveUp.Load())
	assert.Positive(t, credits.Load())
	assert.Zero(t, fleet.busy.Load())
	assertIdle(t, s)
	var admittedTotal float64
	for _, name := range names {
		admittedTotal += s.decisionCount(name, decisionAdmitted)
	}
	assert.GreaterOrEqual(t, admittedTotal, float64(credits.Load()), "every credit handed out was counted")
}
