package main

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// discovery.dns.ip_family and remove_after reach the discoverer: its start
// line says so, and "localhost" looked up for A records only gives the
// IPv4 worker alone (the hosts file answers; no query leaves the machine).
func TestDiscoveryKeysReachTheDiscoverer(t *testing.T) {
	w := startMember(t, "m", false)
	_, port, err := net.SplitHostPort(w.Listener.Addr().String())
	require.NoError(t, err)
	g := startReloadGateway(t, reloadBase+"discovery:\n  dns:\n    name: localhost\n    port: "+port+
		"\n    interval: 50ms\n    ip_family: ipv4\n    remove_after: 7\n")
	id := "127.0.0.1:" + port
	require.Eventually(t, func() bool { return g.routable(t, id) }, 5*time.Second, 5*time.Millisecond)

	resp, err := http.Get(g.url + "/admin/workers")
	require.NoError(t, err)
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	var ids []string
	for _, v := range list.Data {
		ids = append(ids, v.ID)
	}
	assert.Equal(t, []string{id}, ids, "A records only")
	assert.Eventually(t, func() bool { return strings.Contains(g.logText(), `"ip_family":"ipv4","remove_after":7`) },
		5*time.Second, 10*time.Millisecond, "the start line (logs are flushed in batches)")
}
