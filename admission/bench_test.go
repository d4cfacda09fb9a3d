package admission

import (
	"context"
	"testing"
)

// The fast path: a slot is free and nothing waits.
func BenchmarkAdmitRelease(b *testing.B) {
	for _, mode := range []Mode{ModeEnforce, ModeShadow, ModeOff} {
		b.Run(mode.String(), func(b *testing.B) {
			s, _ := newScheduler(b, twoPartitions(mode, 1, 3), newSlots(1<<30), SystemClock)
			ctx := context.Background()
			r := Request{ID: "req", Model: "m", Partition: "b", Cost: 1000}
			b.ReportAllocs()
			for b.Loop() {
				c, err := s.Admit(ctx, r)
				if err != nil {
					b.Fatal(err)
				}
				c.Routed()
				c.Release(OutcomeSuccess, 1000)
			}
		})
	}
}

func BenchmarkAdmitReleaseParallel(b *testing.B) {
	s, _ := newScheduler(b, twoPartitions(ModeEnforce, 1, 3), newSlots(1<<30), SystemClock)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := Request{ID: "req", Model: "m", Partition: "a", Cost: 1000}
		for pb.Next() {
			c, err := s.Admit(ctx, r)
			if err != nil {
				b.Error(err)
				return
			}
			c.Routed()
			c.Release(OutcomeSuccess, 1000)
		}
	})
}

// A full fleet: every request queues, then one release dispatches it.
func BenchmarkQueuedDispatch(b *testing.B) {
	fleet := newSlots(1)
	s, _ := newScheduler(b, twoPartitions(ModeEnforce, 1, 3), fleet, SystemClock)
	held, err := s.Admit(context.Background(), Request{ID: "held", Partition: "a", Cost: 1})
	if err != nil {
		b.Fatal(err)
	}
	var next *Credit
	done := func(c *Credit, err error) { next = c }
	b.ReportAllocs()
	for b.Loop() {
		s.Submit(Request{ID: "q", Partition: "b", Cost: 1000}, done)
		held.Release(OutcomeSuccess, 0)
		held = next
	}
	held.Release(OutcomeSuccess, 0)
}
