package deploy

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/kvgate/kvgate/config"
)

const manifestDir = "kubernetes"

// object is one Kubernetes object of a manifest file: its header, and the
// node it came from, to decode into the kind's own shape.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`

	file string
	node *yaml.Node
}

// manifests are the objects of every YAML file in deploy/kubernetes but
// kustomization.yaml, which is kustomize's, not the cluster's.
type manifests struct {
	objects       []object
	kustomization kustomization
}

type kustomization struct {
	Kind      string   `yaml:"kind"`
	Namespace string   `yaml:"namespace"`
	Resources []string `yaml:"resources"`
	Images    []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
}

func loadManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var m manifests
	for _, file := range files {
		f, err := os.Open(file)
		require.NoError(t, err)
		dec := yaml.NewDecoder(f)
		for {
			var node yaml.Node
			err := dec.Decode(&node)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, file)
			if filepath.Base(file) == "kustomization.yaml" {
				require.NoError(t, node.Decode(&m.kustomization), file)
				continue
			}
			var o object
			require.NoError(t, node.Decode(&o), file)
			o.file, o.node = filepath.Base(file), &node
			m.objects = append(m.objects, o)
		}
		f.Close()
	}
	return m
}

// one returns the object of kind named name, failing the test if there is none.
func (m manifests) one(t *testing.T, kind, name string) object {
	t.Helper()
	for _, o := range m.objects {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("no %s %q in %s", kind, name, manifestDir)
	return object{}
}

func decode[T any](t *testing.T, o object) T {
	t.Helper()
	var v T
	require.NoError(t, o.node.Decode(&v), "%s %s in %s", o.Kind, o.Metadata.Name, o.file)
	return v
}

// The shapes the checks read: the parts of the Kubernetes API they need.
type (
	deployment struct {
		Spec struct {
			Replicas int `yaml:"replicas"`
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Template struct {
				Metadata struct {
					Labels      map[string]string `yaml:"labels"`
					Annotations map[string]string `yaml:"annotations"`
				} `yaml:"metadata"`
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	podSpec struct {
		TerminationGracePeriodSeconds *int  `yaml:"terminationGracePeriodSeconds"`
		EnableServiceLinks            *bool `yaml:"enableServiceLinks"`
		SecurityContext               struct {
			RunAsNonRoot *bool `yaml:"runAsNonRoot"`
			RunAsUser    int   `yaml:"runAsUser"`
		} `yaml:"securityContext"`
		Containers []container `yaml:"containers"`
		Volumes    []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	}
	container struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Ports   []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom any    `yaml:"valueFrom"`
		} `yaml:"env"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
			RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
			Capabilities             struct {
				Drop []string `yaml:"drop"`
			} `yaml:"capabilities"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			SubPath   string `yaml:"subPath"`
		} `yaml:"volumeMounts"`
	}
	probe struct {
		HTTPGet *struct {
			Path string      `yaml:"path"`
			Port intOrString `yaml:"port"`
		} `yaml:"httpGet"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	}
	service struct {
		Spec struct {
			Type      string            `yaml:"type"`
			ClusterIP string            `yaml:"clusterIP"`
			Selector  map[string]string `yaml:"selector"`
			Ports     []struct {
				Name       string      `yaml:"name"`
				Port       int         `yaml:"port"`
				TargetPort intOrString `yaml:"targetPort"`
			} `yaml:"ports"`
		} `yaml:"spec"`
	}
	configMap struct {
		Data map[string]string `yaml:"data"`
	}
	podDisruptionBudget struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
		} `yaml:"spec"`
	}
)

// intOrString is Kubernetes' port reference: a number or a port's name.
type intOrString string

func (p *intOrString) UnmarshalYAML(n *yaml.Node) error {
	*p = intOrString(n.Value)
	return nil
}

// resolve returns the container port p refers to, or 0.
func (p intOrString) resolve(c container) int {
	for _, port := range c.Ports {
		if string(p) == port.Name || string(p) == strconv.Itoa(port.ContainerPort) {
			return port.ContainerPort
		}
	}
	return 0
}

// The objects the deployment is made of, each where kustomization.yaml
// expects it.
func TestManifestsHoldTheExpectedObjects(t *testing.T) {
	m := loadManifests(t)
	var got []string
	for _, o := range m.objects {
		assert.NotEmpty(t, o.APIVersion, o.file)
		assert.NotEmpty(t, o.Metadata.Name, o.file)
		got = append(got, o.Kind+"/"+o.Metadata.Name)
	}
	assert.ElementsMatch(t, []string{
		"Namespace/kvgate",
		"ConfigMap/kvgate-config",
		"Deployment/kvgate",
		"Service/kvgate",
		"PodDisruptionBudget/kvgate",
		"Service/vllm-workers",
	}, got)

	assert.Equal(t, "Kustomization", m.kustomization.Kind)
	var files []string
	for _, o := range m.objects {
		if !slices.Contains(files, o.file) {
			files = append(files, o.file)
		}
	}
	assert.ElementsMatch(t, files, m.kustomization.Resources, "kustomization.yaml lists every manifest, and only those")
	ns := m.one(t, "Namespace", m.kustomization.Namespace)
	assert.Equal(t, "restricted", ns.Metadata.Labels["pod-security.kubernetes.io/enforce"])
}

// gateway is the Deployment's gateway container and what it runs with.
type gateway struct {
	deploy deployment
	pod    podSpec
	c      container
	cfg    config.Config // as the gateway loads it inside the pod
}

// loadGateway loads the ConfigMap's kvgate config the way the gateway
// does in its pod: the container's arguments (or the image's CMD), the
// image's and the container's environment, the file where the ConfigMap is
// mounted.
func loadGateway(t *testing.T, m manifests) gateway {
	t.Helper()
	g := gateway{deploy: decode[deployment](t, m.one(t, "Deployment", "kvgate"))}
	g.pod = g.deploy.Spec.Template.Spec
	require.Len(t, g.pod.Containers, 1)
	g.c = g.pod.Containers[0]
	require.Empty(t, g.c.Command, "the image's entrypoint runs the gateway")

	image := readDockerfile(t)
	args := g.c.Args
	if args == nil {
		args = image.cmd
	}
	environ := slices.Clone(image.env)
	for _, e := range g.c.Env {
		value := e.Value
		if e.ValueFrom != nil {
			// A Secret's value is not ours to know; a stand-in still
			// checks that the variable names a config key.
			value = "stand-in-for-a-secret-value"
		}
		environ = append(environ, e.Name+"="+value)
	}

	fs := pflag.NewFlagSet("gateway", pflag.ContinueOnError)
	config.AddFlags(fs)
	require.NoError(t, fs.Parse(args), "the gateway accepts the container's arguments")
	path, err := fs.GetString("config")
	require.NoError(t, err)
	require.NotEmpty(t, path, "the gateway is pointed at its config file")

	// The file is the ConfigMap's key, mounted as a directory.
	var mounted string
	for _, vm := range g.c.VolumeMounts {
		if filepath.Dir(path) != filepath.Clean(vm.MountPath) {
			continue
		}
		assert.Empty(t, vm.SubPath, "a subPath mount never sees an edited ConfigMap")
		for _, v := range g.pod.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				mounted = v.ConfigMap.Name
			}
		}
	}
	require.NotEmpty(t, mounted, "a ConfigMap is mounted where --config %s points", path)
	data := decode[configMap](t, m.one(t, "ConfigMap", mounted)).Data[filepath.Base(path)]
	require.NotEmpty(t, data, "ConfigMap %s has the key %s", mounted, filepath.Base(path))

	file := filepath.Join(t.TempDir(), filepath.Base(path))
	require.NoError(t, os.WriteFile(file, []byte(data), 0o600))
	require.NoError(t, fs.Set("config", file))
	g.cfg, err = config.Load(fs, environ)
	require.NoError(t, err, "the ConfigMap's kvgate.yaml is a valid config")
	return g
}

func TestConfigMapIsAValidGatewayConfig(t *testing.T) {
	g := loadGateway(t, loadManifests(t))
	assert.True(t, len(g.cfg.Workers) > 0 || g.cfg.Discovery.DNS.Name != "", "the config names workers, or how to find them")
}

func TestPortsAndProbesMatchTheGateway(t *testing.T) {
	m := loadManifests(t)
	g := loadGateway(t, m)
	_, listenPort, err := net.SplitHostPort(g.cfg.Listen)
	require.NoError(t, err)
	port, err := strconv.Atoi(listenPort)
	require.NoError(t, err)
	assert.Equal(t, port, intOrString("http").resolve(g.c), "containerPort http is the port the gateway listens on (%s)", g.cfg.Listen)

	require.NotNil(t, g.c.ReadinessProbe)
	require.NotNil(t, g.c.ReadinessProbe.HTTPGet)
	assert.Equal(t, "/readyz", g.c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, port, g.c.ReadinessProbe.HTTPGet.Port.resolve(g.c), "readiness probes the gateway's port")
	require.NotNil(t, g.c.LivenessProbe)
	require.NotNil(t, g.c.LivenessProbe.HTTPGet)
	assert.Equal(t, "/health", g.c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, port, g.c.LivenessProbe.HTTPGet.Port.resolve(g.c), "liveness probes the gateway's port")

	ann := g.deploy.Spec.Template.Metadata.Annotations
	assert.Equal(t, strconv.Itoa(port), ann["prometheus.io/port"])
	assert.Equal(t, "/metrics", ann["prometheus.io/path"])

	svc := decode[service](t, m.one(t, "Service", "kvgate"))
	require.Len(t, svc.Spec.Ports, 1)
	assert.Equal(t, port, svc.Spec.Ports[0].TargetPort.resolve(g.c), "the Service reaches the gateway's port")
	assert.Subset(t, g.deploy.Spec.Template.Metadata.Labels, svc.Spec.Selector, "the Service selects the gateway's pods")
}

func TestDeploymentKeepsServingThroughRolloutsAndShutdowns(t *testing.T) {
	m := loadManifests(t)
	g := loadGateway(t, m)
	assert.GreaterOrEqual(t, g.deploy.Spec.Replicas, 2)
	labels := g.deploy.Spec.Template.Metadata.Labels
	assert.Subset(t, labels, g.deploy.Spec.Selector.MatchLabels)
	pdb := decode[podDisruptionBudget](t, m.one(t, "PodDisruptionBudget", "kvgate"))
	assert.Subset(t, labels, pdb.Spec.Selector.MatchLabels, "the PodDisruptionBudget covers the gateway's pods")

	// The kubelet sends SIGTERM, waits terminationGracePeriodSeconds, then
	// SIGKILLs: the whole drain must fit in between.
	require.NotNil(t, g.pod.TerminationGracePeriodSeconds)
	grace := time.Duration(*g.pod.TerminationGracePeriodSeconds) * time.Second
	assert.Greater(t, grace, g.cfg.ShutdownDelay+g.cfg.ShutdownGrace,
		"terminationGracePeriodSeconds exceeds shutdown_delay + shutdown_grace")
	assert.Positive(t, g.cfg.ShutdownDelay, "load balancers get time to stop sending before the listener closes")
	r := g.c.ReadinessProbe
	require.NotNil(t, r)
	assert.LessOrEqual(t, time.Duration(r.PeriodSeconds*max(r.FailureThreshold, 1))*time.Second, g.cfg.ShutdownDelay,
		"the readiness probe sees a draining replica fail within shutdown_delay")
}

func TestDeploymentRunsLockedDown(t *testing.T) {
	g := loadGateway(t, loadManifests(t))
	// Kubernetes sets KVGATE_SERVICE_HOST, KVGATE_PORT, ... for a Service
	// named kvgate; the gateway reads every KVGATE_ variable as a config key
	// and would refuse the unknown ones.
	require.NotNil(t, g.pod.EnableServiceLinks)
	assert.False(t, *g.pod.EnableServiceLinks, "enableServiceLinks: false")

	require.NotNil(t, g.pod.SecurityContext.RunAsNonRoot)
	assert.True(t, *g.pod.SecurityContext.RunAsNonRoot)
	assert.NotZero(t, g.pod.SecurityContext.RunAsUser)
	sc := g.c.SecurityContext
	require.NotNil(t, sc.ReadOnlyRootFilesystem)
	assert.True(t, *sc.ReadOnlyRootFilesystem, "read-only root filesystem")
	require.NotNil(t, sc.AllowPrivilegeEscalation)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.Equal(t, []string{"ALL"}, sc.Capabilities.Drop)

	for _, r := range []string{"cpu", "memory"} {
		assert.NotEmpty(t, g.c.Resources.Requests[r], "requests.%s", r)
	}
	assert.NotEmpty(t, g.c.Resources.Limits["memory"], "limits.memory")
}

func TestTheImageIsTheRepositorysDockerfile(t *testing.T) {
	m := loadManifests(t)
	g := loadGateway(t, m)
	df := readDockerfile(t)
	assert.Equal(t, "/usr/local/bin/gateway", df.entrypoint, "the image runs the gateway")
	require.Len(t, m.kustomization.Images, 1)
	img := m.kustomization.Images[0]
	assert.Equal(t, img.Name, g.c.Image, "kustomization.yaml sets the gateway container's image")
	assert.NotEmpty(t, img.NewTag)
}

// The headless Service is the one discovery.dns (or a static worker list
// of StatefulSet pods) names.
func TestWorkersHeadlessServiceIsWhatTheGatewayFinds(t *testing.T) {
	m := loadManifests(t)
	g := loadGateway(t, m)
	const name = "vllm-workers"
	svc := decode[service](t, m.one(t, "Service", name))
	assert.Equal(t, "None", svc.Spec.ClusterIP, "headless: DNS answers with the pods' addresses")
	require.Len(t, svc.Spec.Ports, 1)
	assert.NotEmpty(t, svc.Spec.Selector)

	if d := g.cfg.Discovery.DNS; d.Name != "" {
		host := strings.TrimSuffix(d.Name, ".")
		assert.True(t, host == name || strings.HasPrefix(host, name+"."), "discovery.dns.name %q is the %s Service", d.Name, name)
		assert.Equal(t, svc.Spec.Ports[0].Port, d.Port, "discovery.dns.port is the workers' port")
		return
	}
	require.NotEmpty(t, g.cfg.Workers)
	for _, w := range g.cfg.Workers {
		assert.Contains(t, w.URL, "."+name, "worker %s is a pod of the %s Service", w.ID, name)
	}
}

// dockerfile is what the checks read of the repository's Dockerfile.
type dockerfile struct {
	env        []string // ENV KEY=value, as environ entries
	entrypoint string
	cmd        []string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	require.NoError(t, err)
	var df dockerfile
	for line := range strings.Lines(string(b)) {
		instr, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch instr {
		case "ENV":
			for kv := range strings.FieldsSeq(rest) {
				require.Contains(t, kv, "=", "ENV in KEY=value form")
				df.env = append(df.env, kv)
			}
		case "ENTRYPOINT":
			var e []string
			require.NoError(t, json.Unmarshal([]byte(rest), &e), "ENTRYPOINT in exec form")
			require.Len(t, e, 1)
			df.entrypoint = e[0]
		case "CMD":
			require.NoError(t, json.Unmarshal([]byte(rest), &df.cmd), "CMD in exec form")
		}
	}
	return df
}
