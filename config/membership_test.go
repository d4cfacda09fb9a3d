package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMembershipValidation(t *testing.T) {
	valid := func() Config {
		c := Default()
		c.Workers = []Worker{{ID: "w0", URL: "http://127.0.0.1:9001", Engine: "auto", DPRanks: 1}}
		return c
	}
	tests := []struct {
		name string
		edit func(*Config)
		want string // key path reported; "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"token", func(c *Config) { c.Auth.AdminToken = "0123456789abcdef" }, ""},
		{"short token", func(c *Config) { c.Auth.AdminToken = "short" }, "auth.admin_token"},
		{"token with a space", func(c *Config) { c.Auth.AdminToken = "0123456789 abcdef" }, "auth.admin_token"},
		{"a name", func(c *Config) { c.Discovery.DNS.Name, c.Discovery.DNS.Port = "vllm.default.svc.cluster.local.", 8000 }, ""},
		{"an SRV name", func(c *Config) { c.Discovery.DNS.Name = "_http._tcp.vllm.default.svc.cluster.local" }, ""},
		{"a name without port", func(c *Config) { c.Discovery.DNS.Name = "vllm" }, "discovery.dns.port"},
		{"an SRV name with port", func(c *Config) { c.Discovery.DNS.Name, c.Discovery.DNS.Port = "_http._tcp.vllm", 80 }, "discovery.dns.port"},
		{"port too high", func(c *Config) { c.Discovery.DNS.Name, c.Discovery.DNS.Port = "vllm", 70000 }, "discovery.dns.port"},
		{"bad name", func(c *Config) { c.Discovery.DNS.Name, c.Discovery.DNS.Port = "vllm/x", 80 }, "discovery.dns.name"},
		{"empty label", func(c *Config) { c.Discovery.DNS.Name, c.Discovery.DNS.Port = "a..b", 80 }, "discovery.dns.name"},
		{"scheme", func(c *Config) { c.Discovery.DNS.Scheme = "ftp" }, "discovery.dns.scheme"},
		{"interval", func(c *Config) { c.Discovery.DNS.Interval = time.Millisecond }, "discovery.dns.interval"},
		{"engine", func(c *Config) { c.Discovery.DNS.Engine = "tgi" }, "discovery.dns.engine"},
		{"empty model", func(c *Config) { c.Discovery.DNS.Models = []string{" "} }, "discovery.dns.models[0]"},
		{"dp ranks", func(c *Config) { c.Discovery.DNS.DPRanks = 0 }, "discovery.dns.dp_ranks"},
		{"api key", func(c *Config) { c.Discovery.DNS.APIKey = "a b" }, "discovery.dns.api_key"},
		{"max running", func(c *Config) { c.Discovery.DNS.MaxRunning = -1 }, "discovery.dns.max_running"},
		{"remove at once", func(c *Config) { c.Discovery.DNS.RemoveAfter = 1 }, ""},
		{"remove after zero lookups", func(c *Config) { c.Discovery.DNS.RemoveAfter = 0 }, "discovery.dns.remove_after"},
		{"ipv4 only", func(c *Config) { c.Discovery.DNS.IPFamily = "ipv4" }, ""},
		{"ipv6 only", func(c *Config) { c.Discovery.DNS.IPFamily = "ipv6" }, ""},
		{"ip family", func(c *Config) { c.Discovery.DNS.IPFamily = "ip4" }, "discovery.dns.ip_family"},
		{"no ip family", func(c *Config) { c.Discovery.DNS.IPFamily = "" }, "discovery.dns.ip_family"},
		{"static id like a discovered one", func(c *Config) {
			c.Discovery.DNS.Name, c.Discovery.DNS.Port = "vllm", 8000
			c.Workers[0].ID = "10.0.0.7:8000"
		}, "workers[0].id"},
		{"ip:port ids are fine without discovery", func(c *Config) { c.Workers[0].ID = "10.0.0.7:8000" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.edit(&c)
			err := c.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "  "+tt.want+":")
		})
	}
}

func TestAdminTokenIsNeverShown(t *testing.T) {
	c := Default()
	c.Auth.AdminToken = "short secret"
	err := c.Validate()
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "secret")

	c.Auth.AdminToken = "s3cr3t-s3cr3t-s3cr3t"
	out, err := c.YAML()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "s3cr3t")
	assert.Contains(t, string(out), "admin_token: <redacted>")

	c.Auth.AdminToken = ""
	out, err = c.YAML()
	require.NoError(t, err)
	assert.Contains(t, string(out), `admin_token: ""`, "an unset secret prints as unset, so the output loads back as it was")
}

func TestDiscoveryKeysLoad(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
discovery:
  dns:
    name: vllm.default.svc.cluster.local
    port: 8000
    interval: 2s
    models: [llama]
    max_running: 64
    ip_family: ipv4
`), 0o600))
	c, err := load(t, []string{"--config", file}, []string{"KVGATE_AUTH__ADMIN_TOKEN=0123456789abcdef",
		"KVGATE_DISCOVERY__DNS__REMOVE_AFTER=5"})
	require.NoError(t, err)
	d := c.Discovery.DNS
	assert.Equal(t, DNSDiscovery{Name: "vllm.default.svc.cluster.local", Port: 8000, Interval: 2 * time.Second,
		Scheme: "http", Engine: "auto", Models: []string{"llama"}, MaxRunning: 64, DPRanks: 1,
		RemoveAfter: 5, IPFamily: "ipv4"}, d)
	assert.Equal(t, 3, Default().Discovery.DNS.RemoveAfter, "a readiness blip shorter than three lookups keeps the worker")
	assert.Equal(t, "any", Default().Discovery.DNS.IPFamily)
	assert.Equal(t, "0123456789abcdef", c.Auth.AdminToken)
}

func TestIsDiscoveredID(t *testing.T) {
	assert.True(t, IsDiscoveredID("10.0.0.7:8000"))
	assert.True(t, IsDiscoveredID("[fd00::7]:8000"))
	assert.False(t, IsDiscoveredID("w0"))
	assert.False(t, IsDiscoveredID("gpu-node:8000"))
}

func TestChangedKeys(t *testing.T) {
	a := Default()
	b := Default()
	assert.Empty(t, ChangedKeys(a, b))
	b.Routing.Policy = "random"
	b.Telemetry.Interval = 2 * time.Second
	b.Workers = []Worker{{ID: "w0"}}
	b.Admission.Partitions = []PartitionConfig{{Name: "p", Weight: 2}}
	b.Auth.AdminToken = "0123456789abcdef"
	assert.Equal(t, []string{"workers", "auth.admin_token", "routing.policy", "admission.partitions", "telemetry.interval"},
		ChangedKeys(a, b), "paths in declaration order, lists as one key")
}
