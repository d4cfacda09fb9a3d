package handlers

import (
	"net/http"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/workers"
)

// DELETE of a discovered worker would be undone by the next lookup, its
// cache affinity lost on the way: it is refused with 409 and the way out
// (drain), and the worker is left as it was.
func TestAdminDeleteOfADiscoveredWorkerIsRefused(t *testing.T) {
	h := newAdminHarness(t, adminToken, "0.0.0.0:8080")
	sw := newSwitchWorker(t, true, false)
	const id = "[fd00::7]:8000"
	wk, err := h.reg.Add(workers.Spec{ID: id, URL: sw.URL, Models: []string{"m"}, Engine: workers.EngineVLLM,
		Origin: workers.OriginDiscovery})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return wk.Routable(time.Now()) }, 5*time.Second, 5*time.Millisecond)

	for _, path := range []string{id, "%5Bfd00::7%5D:8000"} {
		resp := h.do(t, "DELETE", "/admin/workers/"+path, "")
		require.Equal(t, http.StatusConflict, resp.StatusCode, path)
		e := decodeError(t, resp)
		require.NotNil(t, e.Error.Code)
		assert.Equal(t, "managed_by_discovery", *e.Error.Code)
		require.NotNil(t, e.Error.Param)
		assert.Equal(t, "id", *e.Error.Param)
		assert.Equal(t, "invalid_request_error", e.Error.Type)
		assert.Contains(t, e.Error.Message, "POST /admin/workers/"+id+"/drain")
	}
	assert.Same(t, wk, h.reg.Get(id), "left as it was")
	assert.False(t, wk.Draining())
	assert.False(t, wk.Removing())

	resp := h.do(t, "POST", "/admin/workers/"+id+"/drain", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var v workerView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	assert.True(t, v.Draining, "drain is the way to take it out")
	assert.Equal(t, workers.OriginDiscovery, v.Origin)
}
