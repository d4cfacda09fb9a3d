package simserver

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/goccy/go-json"
)

// Faults are failures injected into completion requests, for testing how a
// gateway copes with a bad worker. Faults apply to requests that passed
// validation: a malformed request still gets its 400.
type Faults struct {
	// ErrorRate answers this fraction of requests (0..1) with a 500 error
	// object, drawn from an RNG seeded by Config.Seed.
	ErrorRate float64
	// ForceStatus answers every request with this HTTP status (400..599)
	// and an error object; 0 is off.
	ForceStatus int
	// SlowFirstToken holds the first token back until this long (wall
	// time, not scaled) after the request arrived.
	SlowFirstToken time.Duration
	// DieAfterTokens makes the server drop the connection once the request
	// has generated this many tokens: a stream stops mid-way without
	// [DONE], a non-streaming request gets no response at all. 0 is off; a
	// request shorter than that completes normally.
	DieAfterTokens int
	// Hang accepts requests and never answers until the client goes away.
	Hang bool
	// FailHealth makes /health answer 503.
	FailHealth bool
}

// Validate reports a fault setting that has no meaning.
func (f Faults) Validate() error {
	var errs []error
	if !(f.ErrorRate >= 0 && f.ErrorRate <= 1) {
		errs = append(errs, fmt.Errorf("error_rate %v: must be within [0, 1]", f.ErrorRate))
	}
	if f.ForceStatus != 0 && (f.ForceStatus < 400 || f.ForceStatus > 599) {
		errs = append(errs, fmt.Errorf("force_status %d: must be 0 or an error status 400..599", f.ForceStatus))
	}
	if f.SlowFirstToken < 0 {
		errs = append(errs, fmt.Errorf("slow_first_token %v: must not be negative", f.SlowFirstToken))
	}
	if f.DieAfterTokens < 0 {
		errs = append(errs, fmt.Errorf("die_after_tokens %d: must not be negative", f.DieAfterTokens))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("faults: %w", err)
	}
	return nil
}

// faultsJSON is the wire form of Faults for GET /sim/faults.
type faultsJSON struct {
	ErrorRate      float64 `json:"error_rate"`
	ForceStatus    int     `json:"force_status"`
	SlowFirstToken string  `json:"slow_first_token"`
	DieAfterTokens int     `json:"die_after_tokens"`
	Hang           bool    `json:"hang"`
	FailHealth     bool    `json:"fail_health"`
}

func (f Faults) wire() faultsJSON {
	return faultsJSON{
		ErrorRate:      f.ErrorRate,
		ForceStatus:    f.ForceStatus,
		SlowFirstToken: f.SlowFirstToken.String(),
		DieAfterTokens: f.DieAfterTokens,
		Hang:           f.Hang,
		FailHealth:     f.FailHealth,
	}
}

// faultsPatch is a partial update from POST /sim/faults: absent fields keep
// their value.
type faultsPatch struct {
	ErrorRate      *float64      `json:"error_rate"`
	ForceStatus    *int          `json:"force_status"`
	SlowFirstToken *wireDuration `json:"slow_first_token"`
	DieAfterTokens *int          `json:"die_after_tokens"`
	Hang           *bool         `json:"hang"`
	FailHealth     *bool         `json:"fail_health"`
}

func (p faultsPatch) apply(f Faults) Faults {
	if p.ErrorRate != nil {
		f.ErrorRate = *p.ErrorRate
	}
	if p.ForceStatus != nil {
		f.ForceStatus = *p.ForceStatus
	}
	if p.SlowFirstToken != nil {
		f.SlowFirstToken = time.Duration(*p.SlowFirstToken)
	}
	if p.DieAfterTokens != nil {
		f.DieAfterTokens = *p.DieAfterTokens
	}
	if p.Hang != nil {
		f.Hang = *p.Hang
	}
	if p.FailHealth != nil {
		f.FailHealth = *p.FailHealth
	}
	return f
}

// wireDuration reads a Go duration string ("250ms") or a number of seconds.
type wireDuration time.Duration

func (d *wireDuration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		s, err := strconv.Unquote(string(b))
		if err != nil {
			return fmt.Errorf("duration %s: %w", b, err)
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = wireDuration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("duration %s: want a string like \"250ms\" or seconds: %w", b, err)
	}
	*d = wireDuration(secs * float64(time.Second))
	return nil
}
