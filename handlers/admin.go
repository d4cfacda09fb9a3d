package handlers

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	json "github.com/goccy/go-json"

	"github.com/kvgate/kvgate/workers"
)

// AdminOptions wire the admin API (docs/operations-membership.md).
type AdminOptions struct {
	Registry *workers.Registry
	// Token is the bearer token every admin request must carry
	// (auth.admin_token). Empty: the API is open when Listen is a loopback
	// address, and answers 403 otherwise.
	Token string
	// Listen is the gateway's listen address (host:port).
	Listen string
	// CheckWorker applies the config file's defaults and rules to a worker
	// entry, so that a worker added here obeys the rules of one listed in
	// the file. Paths of the problems are relative to the entry ("url").
	CheckWorker func(*WorkerEntry) []FieldProblem
	Logger      *slog.Logger
	Now         func() time.Time
}

// WorkerEntry is a worker as POST /admin/workers takes it: the shape of an
// entry of the config file's workers list.
type WorkerEntry struct {
	ID         string   `json:"id"`
	URL        string   `json:"url"`
	Models     []string `json:"models"`
	Engine     string   `json:"engine"`
	MaxRunning int      `json:"max_running"`
	DPRanks    int      `json:"dp_ranks"`
	// APIKey is write-only: no answer of the admin API shows it.
	APIKey string `json:"api_key"`
}

// FieldProblem is one invalid field of a worker entry.
type FieldProblem struct {
	Path   string
	Reason string
}

// adminMaxBody bounds an admin request body: a worker entry is a few hundred bytes.
const adminMaxBody = 64 << 10

type admin struct {
	opts  AdminOptions
	token *[sha256.Size]byte // digest of the token; nil: no token
	open  bool               // no token, loopback listener
	csrf  *http.CrossOriginProtection
}

// NewAdmin returns the admin API, to mount at /admin:
//
//	GET    /workers              every worker and its state
//	POST   /workers              add a worker (a workers[] entry as JSON)
//	GET    /workers/{id}         one worker
//	DELETE /workers/{id}         drain it, then remove it once idle (202)
//	POST   /workers/{id}/drain   drain it and keep it listed
func NewAdmin(opts AdminOptions) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	a := &admin{opts: opts, csrf: http.NewCrossOriginProtection()}
	if opts.Token != "" {
		d := sha256.Sum256([]byte(opts.Token))
		a.token = &d
	} else {
		// Listening on a loopback address only: reachable from this host alone.
		a.open = loopbackHost(opts.Listen)
	}
	r := chi.NewRouter()
	r.Use(a.authorize)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { writeError(w, errRouteNotFound(r)) })
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) { writeError(w, errMethodNotAllowed(r)) })
	r.Get("/workers", a.list)
	r.Post("/workers", a.add)
	r.Get("/workers/{id}", a.get)
	r.Delete("/workers/{id}", a.retire)
	r.Post("/workers/{id}/drain", a.drain)
	return r
}

// authorize admits requests with the admin token, compared in constant time
// (as digests, so neither its bytes nor its length leak through timing).
// Without a token the API is open on a loopback listener, and then a web
// page the operator visits is the threat: a cross-site request (the
// browser's Sec-Fetch-Site or Origin says so) is refused, and so is any
// Host that is not a loopback name, which a DNS-rebinding page would send.
// Cross-site requests are refused with a token too: browsers send none
// cross-site, and nothing legitimate comes that way.
func (a *admin) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.token == nil && !a.open {
			writeError(w, errAdminDisabled())
			return
		}
		if err := a.csrf.Check(r); err != nil {
			writeError(w, errAdminCrossOrigin())
			return
		}
		switch {
		case a.token != nil:
			token, ok := adminBearer(r.Header.Get("Authorization"))
			got := sha256.Sum256([]byte(token))
			if !ok || subtle.ConstantTimeCompare(got[:], a.token[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="kvgate admin"`)
				writeError(w, errAdminUnauthorized())
				return
			}
		case !loopbackHost(r.Host):
			writeError(w, errAdminCrossOrigin())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether host (a request's Host, or a listen
// address) names this machine by a loopback address or "localhost", with or
// without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// adminBearer extracts TOKEN from "Bearer TOKEN" (scheme in any case).
func adminBearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// workerView is a worker's state as the admin API shows it.
type workerView struct {
	ID         string   `json:"id"`
	URL        string   `json:"url"`
	Origin     string   `json:"origin"`
	Models     []string `json:"models"`
	Engine     string   `json:"engine"`
	MaxRunning int      `json:"max_running"`
	DPRanks    int      `json:"dp_ranks"`
	Healthy    bool     `json:"healthy"`
	Routable   bool     `json:"routable"`
	Circuit    string   `json:"circuit"`
	Draining   bool     `json:"draining"`
	Removing   bool     `json:"removing"`
	Inflight   int      `json:"inflight"`
	Generation uint64   `json:"generation"`
	Revision   uint64   `json:"revision"`
}

func (a *admin) view(w *workers.Worker) workerView {
	now := a.opts.Now()
	id := w.Identity()
	models := w.Models()
	if models == nil {
		models = []string{}
	}
	return workerView{
		ID: id.ID, URL: w.URL(), Origin: w.Origin(), Models: models, Engine: string(w.Engine()),
		MaxRunning: w.MaxRunningHint(), DPRanks: w.DPRanks(),
		Healthy: w.Healthy(), Routable: w.Routable(now), Circuit: w.CircuitState(now).String(),
		Draining: w.Draining(), Removing: w.Removing(), Inflight: w.Inflight(),
		Generation: id.Generation, Revision: id.Revision,
	}
}

type workerList struct {
	Object string       `json:"object"`
	Data   []workerView `json:"data"`
}

// list shows every registered worker, then the old incarnations of replaced
// workers still finishing requests (same id, older generation).
func (a *admin) list(w http.ResponseWriter, _ *http.Request) {
	out := workerList{Object: "list", Data: []workerView{}}
	for _, wk := range a.opts.Registry.Workers() {
		out.Data = append(out.Data, a.view(wk))
	}
	for _, wk := range a.opts.Registry.Replaced() {
		out.Data = append(out.Data, a.view(wk))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *admin) get(w http.ResponseWriter, r *http.Request) {
	id := workerID(r)
	wk := a.opts.Registry.Get(id)
	if wk == nil {
		writeError(w, errWorkerNotFound(id))
		return
	}
	writeJSON(w, http.StatusOK, a.view(wk))
}

func (a *admin) add(w http.ResponseWriter, r *http.Request) {
	entry, apiErr := a.decodeEntry(w, r)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	wk, err := a.opts.Registry.Add(workers.Spec{
		ID: entry.ID, URL: entry.URL, Models: entry.Models, Engine: workers.Engine(entry.Engine),
		MaxRunning: entry.MaxRunning, DPRanks: entry.DPRanks, Origin: workers.OriginAdmin, APIKey: entry.APIKey,
	})
	switch {
	case errors.Is(err, workers.ErrDuplicate):
		writeError(w, errWorkerExists(entry.ID))
		return
	case errors.Is(err, workers.ErrClosed):
		writeError(w, errShuttingDown())
		return
	case err != nil:
		writeError(w, errBadRequest("url", "Invalid worker: "+err.Error()))
		return
	}
	a.opts.Logger.Info("admin: worker added", "worker", entry.ID, "url", entry.URL, "remote", r.RemoteAddr)
	w.Header().Set("Location", "/admin/workers/"+url.PathEscape(entry.ID))
	writeJSON(w, http.StatusCreated, a.view(wk))
}

// decodeEntry reads a worker entry field by field, so that a field of the
// wrong type or an unknown one is reported by name, then applies the config
// file's rules to it.
func (a *admin) decodeEntry(w http.ResponseWriter, r *http.Request) (*WorkerEntry, *apiError) {
	// JSON only: a form or text/plain body is what a cross-site page can
	// send without a preflight.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, errAdminMediaType()
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, adminMaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, errBodyTooLarge(adminMaxBody)
		}
		return nil, errBadRequest("", "Could not read the request body.")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil || raw == nil {
		return nil, errBadRequest("", "The body must be a JSON object: a worker entry with id, url, models, engine, max_running, dp_ranks, api_key.")
	}
	e := &WorkerEntry{}
	fields := map[string]any{
		"id": &e.ID, "url": &e.URL, "models": &e.Models, "engine": &e.Engine,
		"max_running": &e.MaxRunning, "dp_ranks": &e.DPRanks, "api_key": &e.APIKey,
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		dst, ok := fields[k]
		if !ok {
			return nil, errBadRequest(k, "Unknown field `"+k+"`: a worker entry has id, url, models, engine, max_running, dp_ranks and api_key.")
		}
		if err := json.Unmarshal(raw[k], dst); err != nil {
			return nil, errBadRequest(k, "Field `"+k+"` has the wrong type.")
		}
	}
	if a.opts.CheckWorker != nil {
		if problems := a.opts.CheckWorker(e); len(problems) > 0 {
			msgs := make([]string, len(problems))
			for i, p := range problems {
				msgs[i] = p.Path + ": " + p.Reason
			}
			return nil, errBadRequest(problems[0].Path, "Invalid worker: "+strings.Join(msgs, "; ")+".")
		}
	}
	return e, nil
}

// retire drains the worker and removes it once its requests have finished.
// A discovered worker is refused: discovery would add it back at its next
// lookup, so a DELETE would only wipe its cache affinity.
func (a *admin) retire(w http.ResponseWriter, r *http.Request) {
	id := workerID(r)
	if wk := a.opts.Registry.Get(id); wk != nil && wk.Origin() == workers.OriginDiscovery {
		writeError(w, errManagedByDiscovery(id))
		return
	}
	wk, ok := a.opts.Registry.Retire(id)
	if !ok {
		writeError(w, errWorkerNotFound(id))
		return
	}
	a.opts.Logger.Info("admin: worker retiring", "worker", id, "inflight", wk.Inflight(), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusAccepted, a.view(wk))
}

// drain stops routing to the worker and keeps it listed.
func (a *admin) drain(w http.ResponseWriter, r *http.Request) {
	id := workerID(r)
	wk, ok := a.opts.Registry.Drain(id)
	if !ok {
		writeError(w, errWorkerNotFound(id))
		return
	}
	a.opts.Logger.Info("admin: worker drained", "worker", id, "inflight", wk.Inflight(), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, a.view(wk))
}

// workerID is the {id} of the path, unescaped: ids of discovered workers
// hold ':' and, for IPv6, brackets, which clients may percent-encode.
func workerID(r *http.Request) string {
	id := chi.URLParam(r, "id")
	if r.URL.RawPath != "" {
		if u, err := url.PathUnescape(id); err == nil {
			return u
		}
	}
	return id
}
