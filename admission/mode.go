package admission

import (
	"fmt"
	"strings"
)

// Mode is how much the scheduler gates.
type Mode int

const (
	// ModeOff: no gate; every request gets a credit at once, without
	// consulting capacity.
	ModeOff Mode = iota
	// ModeShadow: every decision is computed and counted, but nothing waits
	// and nothing is refused for capacity.
	ModeShadow
	// ModeEnforce: requests wait for a free slot in fair-share order.
	ModeEnforce
)

var modeNames = [...]string{ModeOff: "off", ModeShadow: "shadow", ModeEnforce: "enforce"}

func (m Mode) String() string {
	if m < 0 || int(m) >= len(modeNames) {
		return fmt.Sprintf("Mode(%d)", int(m))
	}
	return modeNames[m]
}

func (m Mode) valid() bool { return m >= ModeOff && m <= ModeEnforce }

// ParseMode parses a configured mode name: off, shadow or enforce (any case).
func ParseMode(s string) (Mode, error) {
	for m, name := range modeNames {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return Mode(m), nil
		}
	}
	return ModeOff, fmt.Errorf("admission: unknown mode %q (want off, shadow or enforce)", s)
}
