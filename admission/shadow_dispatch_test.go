package admission

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The same arrivals and completions, once in enforce and once in shadow:
// shadow counts would_reject exactly where enforce rejects (a request
// enforce would have dispatched into a freed slot is no longer counted as
// waiting).
func TestShadowCountsRejectionsWhereEnforceRejects(t *testing.T) {
	run := func(mode Mode) (rejected, queued float64) {
		cfg := twoPartitions(mode, 1, 1)
		cfg.MaxQueuePerPartition = 1
		fleet := newSlots(1)
		s, _ := newScheduler(t, cfg, fleet, nil)
		ctx := context.Background()
		// R1 takes the only slot.
		r1, err := s.Admit(ctx, Request{ID: "1", Partition: "a", Cost: 1})
		require.NoError(t, err)
		fleet.route(r1)
		// R2: the fleet is full; enforce queues it, shadow runs it.
		var r2 *Credit
		if mode == ModeEnforce {
			s.Submit(Request{ID: "2", Partition: "a", Cost: 1}, func(c *Credit, err error) { require.NoError(t, err); r2 = c })
		} else {
			r2, err = s.Admit(ctx, Request{ID: "2", Partition: "a", Cost: 1})
			require.NoError(t, err)
			fleet.route(r2)
		}
		// R1 ends: in enforce R2 is dispatched into its slot now.
		fleet.finish(r1, 1)
		if mode == ModeEnforce {
			require.NotNil(t, r2)
			fleet.route(r2)
		}
		// R3: R2 runs in the only slot, nobody waits. Enforce queues R3.
		if mode == ModeEnforce {
			s.Submit(Request{ID: "3", Partition: "a", Cost: 1}, func(c *Credit, err error) {})
			return s.decisionCount("a", decisionRejectedQueueFull), s.decisionCount("a", decisionQueued)
		}
		_, err = s.Admit(ctx, Request{ID: "3", Partition: "a", Cost: 1})
		require.NoError(t, err)
		return s.decisionCount("a", decisionShadowWouldReject), s.decisionCount("a", decisionShadowWouldQueue)
	}
	er, eq := run(ModeEnforce)
	sr, sq := run(ModeShadow)
	t.Logf("enforce: rejected=%v queued=%v; shadow: would_reject=%v would_queue=%v", er, eq, sr, sq)
	assert.Equal(t, er, sr, "shadow would_reject must match enforce's rejections")
}

// A dispatch pass reads capacity once, however many waiting requests it
// dispatches: the gateway's capacity walks the whole fleet.
func TestDispatchReadsCapacityOncePerPass(t *testing.T) {
	fleet := newSlots(0)
	s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), fleet, nil)
	got := 0
	for i := range 50 {
		s.Submit(Request{ID: fmt.Sprint(i), Partition: "a", Cost: 1}, func(c *Credit, err error) {
			require.NoError(t, err)
			got++
		})
	}
	require.Zero(t, got)
	fleet.total.Store(40) // telemetry shows 40 free slots
	fleet.calls.Store(0)
	s.Kick()
	assert.Equal(t, 40, got, "exactly the free slots are filled")
	assert.Equal(t, int64(1), fleet.calls.Load(), "capacity read once for 40 dispatches")
}
