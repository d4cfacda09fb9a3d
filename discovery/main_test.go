package discovery

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// package runs a lookup loop, and the workers it adds run health loops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
