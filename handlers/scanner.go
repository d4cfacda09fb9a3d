package handlers

import "bytes"

// span is a value's bytes in the body: [start, end).
type span struct{ start, end int }

// scanner walks JSON that goccy already accepted, to find the spans of the
// values routing reads. It never allocates, checks every bound, and reports
// failure rather than panicking on input it does not understand.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) colon() bool {
	s.ws()
	return s.consume(':')
}

// str scans a string and returns the span of its contents (without quotes).
func (s *scanner) str() (span, bool) {
	s.ws()
	if !s.consume('"') {
		return span{}, false
	}
	start := s.i
	for s.i < len(s.b) {
		j := indexAny2(s.b[s.i:], '"', '\\')
		if j < 0 {
			return span{}, false
		}
		s.i += j
		if s.b[s.i] == '\\' {
			s.i += 2
			continue
		}
		s.i++
		return span{start, s.i - 1}, true
	}
	return span{}, false
}

// object walks an object's members from just inside its opening brace to
// just past its closing one, calling each with the key's contents and the
// value's span. It reports false on input it cannot walk.
func (s *scanner) object(each func(key []byte, val span)) bool {
	for {
		s.ws()
		if s.consume('}') {
			return true
		}
		key, ok := s.str()
		if !ok || !s.colon() {
			return false
		}
		val, ok := s.value()
		if !ok {
			return false
		}
		each(s.b[key.start:key.end], val)
		s.ws()
		s.consume(',')
	}
}

// value scans any value and returns its span (strings with their quotes).
func (s *scanner) value() (span, bool) {
	s.ws()
	if s.i >= len(s.b) {
		return span{}, false
	}
	start := s.i
	switch c := s.b[s.i]; c {
	case '"':
		if _, ok := s.str(); !ok {
			return span{}, false
		}
	case '{', '[':
		if !s.skipContainer() {
			return span{}, false
		}
	default: // number, true, false, null
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return span{start, s.i}, s.i > start
			}
			s.i++
		}
	}
	return span{start, s.i}, true
}

// skipContainer skips a balanced object or array, strings included.
func (s *scanner) skipContainer() bool {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			if _, ok := s.str(); !ok {
				return false
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.i++
				return true
			}
		}
		s.i++
	}
	return false
}

func indexByte(b []byte, c byte) int { return bytes.IndexByte(b, c) }

// indexAny2 finds the first of two bytes, each with the fast IndexByte.
func indexAny2(b []byte, c1, c2 byte) int {
	i := bytes.IndexByte(b, c1)
	if i < 0 {
		return bytes.IndexByte(b, c2)
	}
	if j := bytes.IndexByte(b[:i], c2); j >= 0 {
		return j
	}
	return i
}
