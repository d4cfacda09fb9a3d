package handlers

import (
	"net/http"
	"strconv"
	"time"

	json "github.com/goccy/go-json"
)

// apiError is an error as the client sees it: an HTTP status and an OpenAI
// error object. This file is the one place that spells them.
type apiError struct {
	Status  int
	Type    string
	Code    string
	Param   string
	Message string
	// RetryAfter, when positive, is sent as a Retry-After header (seconds).
	RetryAfter int
}

func (e *apiError) Error() string { return e.Message }

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (e *apiError) body() []byte {
	b, _ := json.Marshal(errorBody{Error: errorObject{
		Message: e.Message, Type: e.Type, Param: optional(e.Param), Code: optional(e.Code),
	}})
	return b
}

func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.body())
}

const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
)

func errBadRequest(param, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Message: msg}
}

func errModelNotFound(model string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "model_not_found", Param: "model",
		Message: "The model `" + model + "` does not exist or no worker serves it."}
}

func errBodyTooLarge(limit int64) *apiError {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: "request_too_large",
		Message: "Request body exceeds the limit of " + strconv.FormatInt(limit, 10) + " bytes."}
}

func errRouteNotFound(r *http.Request) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "unknown_url",
		Message: "Unknown request URL: " + r.Method + " " + r.URL.Path + "."}
}

func errMethodNotAllowed(r *http.Request) *apiError {
	return &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest, Code: "method_not_allowed",
		Message: "Method " + r.Method + " is not allowed on " + r.URL.Path + "."}
}

func errNoWorker(model string) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "no_routable_worker",
		Message: "No healthy worker can serve model `" + model + "` right now.", RetryAfter: 1}
}

func errBodiesOverBudget() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_busy",
		Message: "The gateway holds as many request bodies as it may (limits.max_buffered_body_bytes); retry shortly.", RetryAfter: 1}
}

func errInvalidAPIKey() *apiError {
	return &apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
		Message: "Missing or unknown API key: send it as `Authorization: Bearer KEY`."}
}

func errUnknownPartition() *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "unknown_partition",
		Message: "The partition named by the trusted partition header is not configured."}
}

func errQueueFull(partition string, retryAfter time.Duration) *apiError {
	secs := max(1, int((retryAfter+time.Second-1)/time.Second))
	return &apiError{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded", RetryAfter: secs,
		Message: "Too many requests are waiting for partition `" + partition + "`; retry after " + strconv.Itoa(secs) + "s."}
}

func errQueueTimeout(partition string) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "queue_timeout", RetryAfter: 1,
		Message: "The fleet had no free capacity for partition `" + partition + "` within the queue timeout."}
}

func errAdminUnauthorized() *apiError {
	return &apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_admin_token",
		Message: "Missing or wrong admin token: send auth.admin_token as `Authorization: Bearer TOKEN`."}
}

func errAdminDisabled() *apiError {
	return &apiError{Status: http.StatusForbidden, Type: typeInvalidRequest, Code: "admin_disabled",
		Message: "The admin API is off: set auth.admin_token, or listen on a loopback address."}
}

func errAdminCrossOrigin() *apiError {
	return &apiError{Status: http.StatusForbidden, Type: typeInvalidRequest, Code: "cross_origin_request",
		Message: "The admin API refuses cross-site requests, and without auth.admin_token any Host but a loopback one."}
}

func errAdminMediaType() *apiError {
	return &apiError{Status: http.StatusUnsupportedMediaType, Type: typeInvalidRequest, Code: "unsupported_media_type",
		Message: "Send the worker entry as `Content-Type: application/json`."}
}

func errWorkerExists(id string) *apiError {
	return &apiError{Status: http.StatusConflict, Type: typeInvalidRequest, Code: "worker_exists", Param: "id",
		Message: "A worker with id `" + id + "` is already registered (a draining one leaves once its requests finish)."}
}

func errManagedByDiscovery(id string) *apiError {
	return &apiError{Status: http.StatusConflict, Type: typeInvalidRequest, Code: "managed_by_discovery", Param: "id",
		Message: "Worker `" + id + "` was found by DNS discovery, which would add it back at its next lookup: " +
			"use POST /admin/workers/" + id + "/drain to take it out of routing, or remove its DNS record."}
}

func errWorkerNotFound(id string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "worker_not_found",
		Message: "No worker has id `" + id + "`."}
}

func errShuttingDown() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "shutting_down", RetryAfter: 1,
		Message: "The gateway is shutting down."}
}

func errUpstream(msg string) *apiError {
	return &apiError{Status: http.StatusBadGateway, Type: typeServer, Code: "upstream_error", Message: msg}
}

func errInternal() *apiError {
	return &apiError{Status: http.StatusInternalServerError, Type: typeServer, Code: "internal_error",
		Message: "The gateway failed to handle the request."}
}

// streamErrorEvent is the SSE event that ends a stream whose worker failed
// after the first event reached the client. OpenAI clients surface an event
// carrying "error" as a stream error.
var streamErrorEvent = []byte(`data: {"error":{"message":"The worker failed while streaming the response.","type":"server_error","param":null,"code":"upstream_stream_error"}}` + "\n\n")
