package workers

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// package runs health loops and telemetry pollers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
