package simserver

import (
	"io"
	"net/http"

	"github.com/goccy/go-json"
)

// The simulator's own endpoints: discovery and health as an engine serves
// them, and the /sim/ controls tests use.

type wireModelList struct {
	Object string      `json:"object"`
	Data   []wireModel `json:"data"`
}

type wireModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Root    string `json:"root"`
}

func (s *Server) serveModels(w http.ResponseWriter, _ *http.Request) {
	list := wireModelList{Object: "list", Data: make([]wireModel, 0, len(s.cfg.Models))}
	for _, m := range s.cfg.Models {
		list.Data = append(list.Data, wireModel{ID: m, Object: "model", Created: s.start.Unix(), OwnedBy: "kvgate-enginesim", Root: m})
	}
	writeJSON(w, list)
}

func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if s.faults.Load().FailHealth {
		writeError(w, apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "injected_fault",
			msg: "enginesim injected fault: unhealthy"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("{}"))
}

func (s *Server) serveStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.Stats())
}

func (s *Server) serveFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.faults.Load().wire())
}

// servePatchFaults applies a partial update: fields absent from the body keep
// their value.
func (s *Server) servePatchFaults(w http.ResponseWriter, r *http.Request) {
	var patch faultsPatch
	if !decodeControl(w, r, &patch) {
		return
	}
	f := patch.apply(*s.faults.Load())
	if err := s.SetFaults(f); err != nil {
		writeError(w, apiError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: err.Error()})
		return
	}
	writeJSON(w, f.wire())
}

func (s *Server) serveLoadOverride(w http.ResponseWriter, _ *http.Request) {
	o := s.override.Load()
	if o == nil {
		o = &LoadOverride{}
	}
	writeJSON(w, o)
}

func (s *Server) serveSetLoadOverride(w http.ResponseWriter, r *http.Request) {
	var o LoadOverride
	if !decodeControl(w, r, &o) {
		return
	}
	if err := s.SetLoadOverride(&o); err != nil {
		writeError(w, requestError(err))
		return
	}
	writeJSON(w, o)
}

func (s *Server) serveClearLoadOverride(w http.ResponseWriter, _ *http.Request) {
	_ = s.SetLoadOverride(nil)
	w.WriteHeader(http.StatusNoContent)
}

// decodeControl reads a small JSON control body, answering 400 itself when
// it cannot.
func decodeControl(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
	if err == nil {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		writeError(w, apiError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: "invalid control body: " + err.Error()})
		return false
	}
	return true
}
