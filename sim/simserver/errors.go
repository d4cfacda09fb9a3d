package simserver

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/goccy/go-json"

	"github.com/kvgate/kvgate/sim"
)

// apiError is an OpenAI error object with its HTTP status. Every error the
// server answers goes through writeError.
type apiError struct {
	status int
	typ    string
	msg    string
	param  string // "" is null
	code   string // "" is null
}

type wireError struct {
	Error wireErrorBody `json:"error"`
}

type wireErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func writeError(w http.ResponseWriter, e apiError) {
	body := wireErrorBody{Message: e.msg, Type: e.typ}
	if e.param != "" {
		body.Param = &e.param
	}
	if e.code != "" {
		body.Code = &e.code
	}
	b, err := json.Marshal(wireError{Error: body})
	if err != nil {
		// A struct of strings always encodes; keep the status regardless.
		b = []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.status == http.StatusTooManyRequests || e.status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

// requestError maps a failure to decode, validate or submit a request to
// its OpenAI error.
func requestError(err error) apiError {
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		return apiError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: bad.msg, param: bad.param}
	case errors.Is(err, sim.ErrTooLarge):
		return apiError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: err.Error(),
			param: "max_tokens", code: "context_length_exceeded"}
	default:
		return apiError{status: http.StatusInternalServerError, typ: "server_error", msg: err.Error()}
	}
}

// forcedError is the error object of an injected status.
func forcedError(status int) apiError {
	typ := "server_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status < 500:
		typ = "invalid_request_error"
	}
	return apiError{status: status, typ: typ, code: "injected_fault",
		msg: "enginesim injected fault: status " + strconv.Itoa(status)}
}

func modelNotFound(model string) apiError {
	return apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "model", code: "model_not_found",
		msg: "The model `" + model + "` does not exist."}
}
