package sim

import "time"

// startStep schedules the step that begins at: prefill chunks for requests
// still prefilling, then admission from the waiting queue in FIFO order.
// Its duration is the prefill of every prompt token it scheduled plus one
// decode step for the whole batch. An empty batch leaves the engine idle.
func (e *Engine) startStep(at time.Duration) {
	chunked := e.cfg.PrefillChunkTokens > 0
	budget := e.cfg.PrefillChunkTokens
	scheduled := 0

	for _, r := range e.running {
		if r.phase != PhasePrefilling {
			continue
		}
		if chunked && budget == 0 {
			break
		}
		n := r.PromptTokens - r.computed
		if chunked {
			n = min(n, budget)
			budget -= n
		}
		r.computed += n
		scheduled += n
		e.cacheScheduled(r)
	}

	for e.waiting.len() > 0 && len(e.running) < e.cfg.MaxRunning && (!chunked || budget > 0) {
		// A head that did not fit keeps not fitting until some block is
		// released: skip the lookups rather than redo them every step.
		if e.headBlocked && e.headBlockedV == e.kvVersion {
			break
		}
		r := e.waiting.front()
		if !e.allocate(r) {
			e.headBlocked, e.headBlockedV = true, e.kvVersion
			break
		}
		e.headBlocked = false
		e.waiting.pop()
		e.waitingPromptTokens -= r.PromptTokens
		r.phase = PhasePrefilling
		e.running = append(e.running, r)

		n := r.PromptTokens - r.computed
		if chunked {
			n = min(n, budget)
			budget -= n
		}
		r.computed += n
		scheduled += n
		e.cacheScheduled(r)
	}

	if len(e.running) == 0 {
		e.stepping = false
		return
	}
	e.stepping = true
	e.stepEnd = at + e.cfg.prefillTime(scheduled) + e.cfg.decodeTime(len(e.running))
}

// finishStep ends the step at time at: every request whose prefill is done
// emits a token (its first if the prefill completed in this step), and the
// requests that reached their output length leave, releasing their blocks.
func (e *Engine) finishStep(at time.Duration, dst []Event) []Event {
	kept := e.running[:0]
	for _, r := range e.running {
		switch r.phase {
		case PhasePrefilling:
			if r.computed < r.PromptTokens {
				kept = append(kept, r)
				continue
			}
			r.phase = PhaseDecoding
			r.generated = 1
			dst = append(dst, Event{At: at, ID: r.ID, Kind: EventFirstToken, Tokens: 1, CachedTokens: r.cachedTokens})
		case PhaseDecoding:
			r.generated++
			if r.TokenEvents {
				dst = append(dst, Event{At: at, ID: r.ID, Kind: EventToken, Tokens: r.generated, CachedTokens: r.cachedTokens})
			}
		}
		if r.generated >= r.OutputTokens {
			dst = append(dst, Event{At: at, ID: r.ID, Kind: EventFinished, Tokens: r.generated, CachedTokens: r.cachedTokens})
			e.release(r)
			delete(e.byID, r.ID)
			e.recycle(r)
			continue
		}
		kept = append(kept, r)
	}
	clear(e.running[len(kept):])
	e.running = kept
	return dst
}
