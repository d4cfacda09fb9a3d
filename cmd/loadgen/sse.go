package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"time"

	json "github.com/goccy/go-json"
)

// Byte patterns the SSE reader looks for. A key pattern such as "content":
// cannot match inside a string value, where its quotes would be escaped, nor
// inside a longer key ("reasoning_content":), whose quote sits elsewhere.
var (
	dataField      = []byte("data:")
	doneMarker     = []byte("[DONE]")
	errorKey       = []byte(`"error":`)
	usageKey       = []byte(`"completion_tokens"`)
	chatContentKey = []byte(`"content":`)
	textContentKey = []byte(`"text":`)
)

// errUsageDecode marks a stream whose usage object is not valid JSON.
var errUsageDecode = errors.New("usage chunk is not valid JSON")

// streamOutcome is what one SSE response said.
type streamOutcome struct {
	done             bool      // saw data: [DONE]
	errorEvent       bool      // saw data: {"error": ...}
	firstContent     time.Time // when the first chunk with content was read; zero if none
	contentChunks    int
	completionTokens int // from the last usage object; -1 if none came
}

// sseReader reads one response's event stream; pooled with its buffers.
type sseReader struct {
	br   *bufio.Reader
	line []byte // holds a line longer than br's buffer
}

func newSSEReader() *sseReader {
	return &sseReader{br: bufio.NewReaderSize(nil, 16<<10)}
}

// read consumes events from r until [DONE], an error event, EOF or a read
// error. contentKey selects the field that carries output ("content": for
// chat, "text": for completions). Chunks are classified by byte search; only
// usage and error objects are decoded. EOF before [DONE] is not an error
// here: the caller sees done == false.
func (s *sseReader) read(r io.Reader, contentKey []byte) (streamOutcome, error) {
	out := streamOutcome{completionTokens: -1}
	s.br.Reset(r)
	defer s.br.Reset(nil)
	for {
		line, err := s.readLine()
		if len(line) > 0 {
			if stop, perr := out.event(line, contentKey); perr != nil || stop {
				return out, perr
			}
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// readLine returns the next line without its line ending. The slice is valid
// until the next call.
func (s *sseReader) readLine() ([]byte, error) {
	line, err := s.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.line = append(s.line[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.br.ReadSlice('\n')
			s.line = append(s.line, line...)
		}
		line = s.line
	}
	line = bytes.TrimRight(line, "\r\n")
	return line, err
}

// event handles one line of the stream and reports whether the stream is
// over. Lines other than data: (comments, event:, id:, blank separators)
// carry nothing loadgen measures.
func (o *streamOutcome) event(line, contentKey []byte) (stop bool, err error) {
	if !bytes.HasPrefix(line, dataField) {
		return false, nil
	}
	payload := line[len(dataField):]
	if len(payload) > 0 && payload[0] == ' ' {
		payload = payload[1:]
	}
	if bytes.Equal(payload, doneMarker) {
		o.done = true
		return true, nil
	}
	if bytes.Contains(payload, errorKey) && hasErrorObject(payload) {
		o.errorEvent = true
		return true, nil
	}
	if hasContent(payload, contentKey) {
		if o.contentChunks == 0 {
			o.firstContent = time.Now()
		}
		o.contentChunks++
	}
	if bytes.Contains(payload, usageKey) {
		var u usageChunk
		if err := json.Unmarshal(payload, &u); err != nil {
			return true, errUsageDecode
		}
		if u.Usage != nil {
			o.completionTokens = u.Usage.CompletionTokens
		}
	}
	return false, nil
}

type usageChunk struct {
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// hasErrorObject reports whether payload is a JSON object with a non-null
// top-level "error", which is how OpenAI-compatible servers report a failure
// after the 200 status has gone out. Servers that add "error": null to
// every chunk are not failing.
func hasErrorObject(payload []byte) bool {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(payload, &e) != nil {
		return false
	}
	return len(e.Error) > 0 && !bytes.Equal(e.Error, []byte("null"))
}

// hasContent reports whether some occurrence of key in payload is followed
// by a non-empty string: "content":"x" counts, "content":"" and
// "content":null (the role-only first chunk) do not.
func hasContent(payload, key []byte) bool {
	for {
		i := bytes.Index(payload, key)
		if i < 0 {
			return false
		}
		payload = payload[i+len(key):]
		j := 0
		for j < len(payload) && (payload[j] == ' ' || payload[j] == '\t') {
			j++
		}
		if j+1 < len(payload) && payload[j] == '"' && payload[j+1] != '"' {
			return true
		}
	}
}
