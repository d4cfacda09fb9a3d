package workers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"

	json "github.com/goccy/go-json"
)

// checkHealth runs one active health check of w and applies its verdict:
// UnhealthyThreshold consecutive failures take the worker out,
// HealthyThreshold consecutive passes bring it back. A worker whose models
// are learned must also answer /v1/models.
func (r *Registry) checkHealth(ctx context.Context, w *Worker) {
	err := r.probe(ctx, w)
	if ctx.Err() != nil {
		return
	}
	wasHealthy := w.healthy.Load()
	if err == nil {
		w.failStreak = 0
		w.okStreak++
		if !wasHealthy && (w.okStreak >= r.opts.HealthyThreshold || w.neverHealthy()) {
			if w.everHealthy {
				// Back from the dead: the process may have restarted and lost
				// its cache, so decisions bound to the old generation fail closed.
				w.generation.Add(1)
			}
			w.everHealthy = true
			w.healthy.Store(true)
			r.opts.Logger.Info("worker healthy", "worker", w.id, "generation", w.generation.Load(), "models", w.Models())
			r.changed()
		}
		return
	}
	w.okStreak = 0
	w.failStreak++
	if wasHealthy && w.failStreak >= r.opts.UnhealthyThreshold {
		w.healthy.Store(false)
		r.opts.Logger.Warn("worker unhealthy", "worker", w.id, "error", err)
		r.changed()
	} else if !wasHealthy && w.failStreak == 1 {
		r.opts.Logger.Debug("worker health check failed", "worker", w.id, "error", err)
	}
}

func (w *Worker) neverHealthy() bool { return !w.everHealthy }

func (r *Registry) probe(ctx context.Context, w *Worker) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.HealthTimeout)
	defer cancel()
	if err := r.get(ctx, w, r.opts.HealthPath, nil); err != nil {
		return err
	}
	if !w.modelsLearned() {
		return nil
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := r.get(ctx, w, "/v1/models", &list); err != nil {
		return fmt.Errorf("models: %w", err)
	}
	models := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" && !slices.Contains(models, m.ID) {
			models = append(models, m.ID)
		}
	}
	if len(models) == 0 {
		return fmt.Errorf("models: worker lists none")
	}
	slices.Sort(models)
	w.setModels(models)
	return nil
}

// get fetches path on w and, when out is non-nil, decodes its JSON body
// into out.
func (r *Registry) get(ctx context.Context, w *Worker, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.baseURL+path, nil)
	if err != nil {
		return err
	}
	w.authorize(req)
	resp, err := r.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", path, resp.StatusCode)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, out)
}
