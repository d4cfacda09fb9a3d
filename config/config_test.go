package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func load(t *testing.T, args []string, environ []string) (Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs)
	require.NoError(t, fs.Parse(args))
	return Load(fs, environ)
}

func TestDefaultsAreValid(t *testing.T) {
	c := Default()
	require.NoError(t, c.Validate())
	got, err := load(t, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, Default(), got)
}

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../examples/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := load(t, []string{"--config", f}, nil)
			require.NoError(t, err)
			assert.NotEmpty(t, c.Workers)
			for _, w := range c.Workers {
				assert.NotEmpty(t, w.Engine, "worker defaults applied")
				assert.GreaterOrEqual(t, w.DPRanks, 1)
			}
		})
	}
}

var wantLine = regexp.MustCompile(`(?m)^# want: (.+)$`)

// Each invalid example names, in a "# want:" line, every key path its error must report.
func TestInvalidExamplesReportKeyPaths(t *testing.T) {
	files, err := filepath.Glob("../examples/invalid/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			body, err := os.ReadFile(f)
			require.NoError(t, err)
			m := wantLine.FindSubmatch(body)
			require.NotNil(t, m, "invalid example needs a '# want:' line")
			_, err = load(t, []string{"--config", f}, nil)
			require.Error(t, err)
			require.True(t, IsValidation(err), "error lists problems by key path: %v", err)
			for _, path := range strings.Split(string(m[1]), ",") {
				assert.Contains(t, err.Error(), "  "+strings.TrimSpace(path)+":", "error names %s", path)
			}
		})
	}
}

func TestLayering(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
listen: 127.0.0.1:7000
routing:
  policy: random
telemetry:
  interval: 2s
  max_age: 10s
  timeout: 1s
`), 0o600))

	tests := []struct {
		name     string
		args     []string
		environ  []string
		listen   string
		policy   string
		interval time.Duration
	}{
		{"file over defaults", []string{"--config", file}, nil, "127.0.0.1:7000", "random", 2 * time.Second},
		{"env over file", []string{"--config", file},
			[]string{"KVGATE_ROUTING__POLICY=round_robin", "KVGATE_TELEMETRY__INTERVAL=3s", "OTHER=x"},
			"127.0.0.1:7000", "round_robin", 3 * time.Second},
		{"flags over env", []string{"--config", file, "--routing.policy", "least_load", "--listen", "127.0.0.1:7001"},
			[]string{"KVGATE_ROUTING__POLICY=round_robin"},
			"127.0.0.1:7001", "least_load", 2 * time.Second},
		{"file named by env", nil, []string{"KVGATE_CONFIG=" + file}, "127.0.0.1:7000", "random", 2 * time.Second},
		{"unchanged flag keeps file value", []string{"--config", file, "--log.level", "debug"}, nil,
			"127.0.0.1:7000", "random", 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, tt.environ)
			require.NoError(t, err)
			assert.Equal(t, tt.listen, c.Listen)
			assert.Equal(t, tt.policy, c.Routing.Policy)
			assert.Equal(t, tt.interval, c.Telemetry.Interval)
		})
	}
}

func TestUnknownEnvKeyIsReported(t *testing.T) {
	_, err := load(t, nil, []string{"KVGATE_ROUTING__POLCY=x"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "routing.polcy: unknown key")
}

func TestBadValueTypeIsReported(t *testing.T) {
	_, err := load(t, nil, []string{"KVGATE_LIMITS__MAX_BODY_BYTES=lots"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "max_body_bytes")
}

func TestMissingFileIsReported(t *testing.T) {
	_, err := load(t, []string{"--config", filepath.Join(t.TempDir(), "nope.yaml")}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nope.yaml")
}

func TestPrintedConfigLoadsBack(t *testing.T) {
	c, err := load(t, []string{"--config", "../examples/fleet.yaml"}, nil)
	require.NoError(t, err)
	out, err := c.YAML()
	require.NoError(t, err)
	assert.Contains(t, string(out), "interval: 500ms")

	file := filepath.Join(t.TempDir(), "printed.yaml")
	require.NoError(t, os.WriteFile(file, out, 0o600))
	back, err := load(t, []string{"--config", file}, nil)
	require.NoError(t, err)
	assert.Equal(t, c, back)
}

func TestValidateWorker(t *testing.T) {
	good := Worker{ID: "a", URL: "http://127.0.0.1:1", Engine: "vllm", DPRanks: 1}
	assert.Empty(t, ValidateWorker(good))
	bad := Worker{ID: "a b", URL: "ftp://x", Engine: "x", DPRanks: 0, MaxRunning: -1, Models: []string{""}}
	paths := map[string]bool{}
	for _, e := range ValidateWorker(bad) {
		paths[e.Path] = true
	}
	for _, p := range []string{"id", "url", "engine", "dp_ranks", "max_running", "models[0]"} {
		assert.True(t, paths[p], "reports %s", p)
	}
}

// The README's configuration reference is generated from the struct tags and
// defaults; this test fails when the two drift apart.
func TestReadmeReferenceIsCurrent(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	const begin, end = "<!-- config-reference:begin -->\n", "<!-- config-reference:end -->"
	s := string(readme)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	require.True(t, i >= 0 && j > i, "README has the config reference markers")
	assert.Equal(t, Reference(), s[i+len(begin):j],
		"README config reference is stale: run `make docs` (go run ./cmd/gateway --config-reference)")
}

func TestBareNumberDurationsAreRejected(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("telemetry:\n  interval: 1\n"), 0o600))
	_, err := load(t, []string{"--config", file}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "needs a unit")
	assert.Contains(t, err.Error(), "interval")

	_, err = load(t, nil, []string{"KVGATE_HEALTH__INTERVAL=1ms"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "health.interval: must be at least 10ms")
}

func TestWorkersCannotComeFromTheEnvironment(t *testing.T) {
	_, err := load(t, []string{"--config", "../examples/minimal.yaml"}, []string{"KVGATE_WORKERS__0__URL=http://x"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "env_workers_0_url: unknown key")
}

func TestPrintedConfigRedactsAPIKeys(t *testing.T) {
	c, err := load(t, []string{"--config", "../examples/tenants.yaml"}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"batch-key-change-me"}, c.Admission.Partitions[0].APIKeys)
	out, err := c.YAML()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "change-me")
	assert.Contains(t, string(out), "<redacted>")
}

func TestInvalidKeyErrorsNeverShowTheKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("admission:\n  partitions:\n    - name: a\n      api_keys: [\"sec ret\", \"s3cr3t\", \"s3cr3t\"]\n  default_partition: a\n"), 0o600))
	_, err := load(t, []string{"--config", file}, nil)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cr3t")
	assert.NotContains(t, err.Error(), "sec ret")
	assert.Contains(t, err.Error(), "admission.partitions[0].api_keys[2]")
}

func TestListKeysFromFlagsAndEnvironment(t *testing.T) {
	c, err := load(t, []string{"--config", "../examples/tenants.yaml", "--admission.seeding.partitions", "batch,interactive"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"batch", "interactive"}, c.Admission.Seeding.Partitions)
	c, err = load(t, []string{"--config", "../examples/tenants.yaml"}, []string{"KVGATE_ADMISSION__SEEDING__PARTITIONS=interactive"})
	require.NoError(t, err)
	assert.Equal(t, []string{"interactive"}, c.Admission.Seeding.Partitions)
	_, err = load(t, []string{"--config", "../examples/tenants.yaml", "--admission.seeding.partitions", "nobody"}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "admission.seeding.partitions[0]")
}

// A worker's API key, listed or discovered, is printed redacted and must be
// one token.
func TestWorkerAPIKeysAreSecret(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("workers:\n  - id: a\n    url: http://127.0.0.1:9\n    api_key: engine-secret-1\n"+
		"discovery:\n  dns:\n    name: vllm.test\n    port: 8000\n    api_key: engine-secret-2\n"), 0o600))
	c, err := load(t, []string{"--config", file}, nil)
	require.NoError(t, err)
	assert.Equal(t, "engine-secret-1", c.Workers[0].APIKey)
	assert.Equal(t, "engine-secret-2", c.Discovery.DNS.APIKey)
	out, err := c.YAML()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "engine-secret")
	assert.Equal(t, 2, strings.Count(string(out), "api_key: <redacted>"))

	assert.Equal(t, []FieldError{{Path: "api_key", Reason: "must not contain whitespace"}},
		ValidateWorker(Worker{ID: "a", URL: "http://127.0.0.1:9", Engine: "vllm", DPRanks: 1, APIKey: "two words"}))
}

func TestBodyBudgetMustHoldTheLargestBody(t *testing.T) {
	_, err := load(t, nil, []string{"KVGATE_LIMITS__MAX_BUFFERED_BODY_BYTES=1048576"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "limits.max_buffered_body_bytes: must be 0 (no bound) or at least limits.max_body_bytes")
	_, err = load(t, nil, []string{"KVGATE_LIMITS__MAX_BUFFERED_BODY_BYTES=0"})
	require.NoError(t, err)
}

func TestColdPlacementIsP2COrHashed(t *testing.T) {
	c, err := load(t, nil, []string{"KVGATE_ROUTING__COLD_PLACEMENT=hashed"})
	require.NoError(t, err)
	assert.Equal(t, "hashed", c.Routing.ColdPlacement)
	_, err = load(t, nil, []string{"KVGATE_ROUTING__COLD_PLACEMENT=sticky"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `routing.cold_placement: must be p2c or hashed, got "sticky"`)
}
