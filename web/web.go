// Package web is the status page: one HTML document, a stylesheet and a
// small script, embedded in the binary so the gateway serves them with no
// file on disk and no asset from anywhere else (no CDN, no web font).
//
// It decides how the page's files are served (types, caching, the content
// security policy the page is written for) and nothing else: the page draws
// what GET /api/status (handlers) returns, and this package reads no state
// of the gateway.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"time"
)

//go:embed assets
var files embed.FS

// contentTypes are the types of the files in assets/, spelled here rather
// than taken from the system's MIME table, which differs between machines
// (application/javascript on some).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
}

// contentSecurityPolicy allows the page only its own script, style and
// JSON feed. The page builds every element with textContent; the policy is
// the second wall should a worker-provided string ever reach markup.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// file is one embedded file, ready to serve.
type file struct {
	name        string
	body        []byte
	contentType string
	etag        string // strong: a digest of the body
}

// served maps request paths to files: the page at /, its assets under /assets/.
var served = mustLoad()

func mustLoad() map[string]*file {
	m := map[string]*file{}
	err := fs.WalkDir(files, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			return &fs.PathError{Op: "serve", Path: p, Err: fs.ErrInvalid} // a file type without a declared content type
		}
		body, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		f := &file{name: path.Base(p), body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		if p == "assets/index.html" {
			m["/"] = f
		} else {
			m["/"+p] = f
		}
		return nil
	})
	if err == nil && m["/"] == nil {
		err = fs.ErrNotExist
	}
	if err != nil {
		// The files are part of the binary: this is a build mistake that
		// web's tests catch, never a condition of the running gateway.
		panic("web: embedded assets unusable: " + err.Error())
	}
	return m
}

// Handler serves the page at / and its assets under /assets/ (mount it for
// GET and HEAD); any other path goes to notFound. Every file is revalidated on each
// load (Cache-Control: no-cache) against a strong ETag, so a new binary's
// page is never mixed with an old cached script, and an unchanged one costs
// a 304.
func Handler(notFound http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := served[r.URL.Path]
		if !ok {
			notFound.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if f.contentType == contentTypes[".html"] {
			h.Set("Content-Security-Policy", contentSecurityPolicy)
		}
		http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(f.body))
	})
}
