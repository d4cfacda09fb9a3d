package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/sim/simserver"
)

// demoFleet is the in-process simulated fleet of `gateway --demo`: engine
// simulators on loopback ephemeral ports, speaking vLLM's HTTP API and
// telemetry, so the demo exercises the same code paths as production.
type demoFleet struct {
	servers []*simserver.Server
	workers []config.Worker
}

const demoModel = "sim"

func startDemoFleet(n int) (*demoFleet, error) {
	if n < 1 || n > 64 {
		return nil, fmt.Errorf("--demo-workers must be 1..64, got %d", n)
	}
	f := &demoFleet{}
	for i := range n {
		cfg := simserver.DefaultConfig()
		cfg.Models = []string{demoModel}
		cfg.Seed = uint64(i + 1)
		cfg.Engine.MaxRunning = 16
		s, err := simserver.New(cfg)
		if err != nil {
			f.Close()
			return nil, err
		}
		addr, err := s.Start("127.0.0.1:0")
		if err != nil {
			f.Close()
			return nil, err
		}
		f.servers = append(f.servers, s)
		w := config.DefaultWorker()
		w.ID = fmt.Sprintf("sim-%d", i)
		w.URL = "http://" + addr
		w.Engine = "vllm"
		w.MaxRunning = cfg.Engine.MaxRunning
		f.workers = append(f.workers, w)
	}
	return f, nil
}

// Close stops every simulated worker.
func (f *demoFleet) Close() error {
	var errs []error
	for _, s := range f.servers {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

func (f *demoFleet) printWelcome(w io.Writer, addr string) {
	fmt.Fprintf(w, `
kvgate demo: %d simulated workers behind http://%[2]s (model %[3]q)

  curl -s http://%[2]s/v1/chat/completions \
    -H 'Content-Type: application/json' \
    -d '{"model":"%[3]s","messages":[{"role":"user","content":"Hello!"}],"max_tokens":24}'

  # streaming, with usage:
  curl -sN http://%[2]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"%[3]s","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hi"}]}'

  # Python (pip install openai):
  from openai import OpenAI
  client = OpenAI(base_url="http://%[2]s/v1", api_key="unused")
  r = client.chat.completions.create(model="%[3]s", messages=[{"role": "user", "content": "Hello!"}])
  print(r.choices[0].message.content, r.usage)

  status page: http://%[2]s/    (open it in a browser while the load below runs)
  metrics: http://%[2]s/metrics    readiness: http://%[2]s/readyz    API: http://%[2]s/openapi.yaml
  load:    go run ./cmd/loadgen --url http://%[2]s/v1 --model %[3]s --rate 20 --duration 30s --stream

Ctrl-C stops the gateway and the simulated workers.
`, len(f.servers), addr, demoModel)
}
