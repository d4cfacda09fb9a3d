// Package deploy holds kvgate's deployment artifacts: Kubernetes manifests
// (kubernetes/, applied with kubectl apply -k) and a Grafana dashboard
// (grafana/kvgate.json). It has no code to run; its tests keep the artifacts
// in step with the gateway: the ConfigMap's config must load through the
// gateway's own config loader, the probes and ports must match what the
// gateway serves, the shutdown timings must let a drain finish, and every
// metric a dashboard panel queries must be one the gateway (or, for the
// engine panels, a vLLM worker) exports. docs/deployment.md walks through
// both.
package deploy
