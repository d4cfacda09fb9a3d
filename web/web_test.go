package web

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notFound marks requests Handler passed on.
var notFound = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })

func get(t *testing.T, method, path string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	Handler(notFound).ServeHTTP(rec, req)
	return rec
}

func TestEveryFileServedWithItsTypeAndRevalidated(t *testing.T) {
	cases := map[string]string{
		"/":                  "text/html; charset=utf-8",
		"/assets/status.css": "text/css; charset=utf-8",
		"/assets/status.js":  "text/javascript; charset=utf-8",
	}
	require.Len(t, served, len(cases), "a new asset needs a case here")
	for path, contentType := range cases {
		t.Run(path, func(t *testing.T) {
			rec := get(t, http.MethodGet, path, nil)
			require.Equal(t, http.StatusOK, rec.Code)
			assert.Equal(t, contentType, rec.Header().Get("Content-Type"))
			assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
			assert.Equal(t, "no-cache", rec.Header().Get("Cache-Control"), "revalidate, so a new binary's page is never mixed with an old script")
			etag := rec.Header().Get("ETag")
			require.Regexp(t, `^"[0-9a-f]{24}"$`, etag)
			assert.NotEmpty(t, rec.Body.Bytes())

			again := get(t, http.MethodGet, path, http.Header{"If-None-Match": {etag}})
			assert.Equal(t, http.StatusNotModified, again.Code)
			assert.Empty(t, again.Body.Bytes())

			head := get(t, http.MethodHead, path, nil)
			assert.Equal(t, http.StatusOK, head.Code)
			assert.Empty(t, head.Body.Bytes())
		})
	}
}

func TestOnlyThePageCarriesTheContentSecurityPolicy(t *testing.T) {
	csp := get(t, http.MethodGet, "/", nil).Header().Get("Content-Security-Policy")
	for _, directive := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		assert.Contains(t, csp, directive)
	}
	assert.NotContains(t, csp, "unsafe-inline")
	assert.Empty(t, get(t, http.MethodGet, "/assets/status.js", nil).Header().Get("Content-Security-Policy"))
}

func TestOtherPathsGoToNotFound(t *testing.T) {
	for _, path := range []string{"/index.html", "/assets/", "/assets/index.html", "/assets/missing.js", "/assets/../web.go", "/status.js"} {
		assert.Equal(t, http.StatusTeapot, get(t, http.MethodGet, path, nil).Code, path)
	}
}

func asset(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(files, "assets/"+name)
	require.NoError(t, err)
	return string(b)
}

// The page works offline and leaks nothing: it loads no script, style, font
// or image from anywhere but the gateway itself.
func TestPageLoadsNothingFromElsewhere(t *testing.T) {
	html := asset(t, "index.html")
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(html, -1)
	require.NotEmpty(t, refs)
	for _, ref := range refs {
		u := ref[1]
		if u == "data:," {
			continue
		}
		assert.NotContains(t, u, ":", "%s: relative to the gateway, no scheme", u)
		assert.False(t, strings.HasPrefix(u, "/"), "%s: relative, so the page also works under a path prefix", u)
		if strings.HasPrefix(u, "assets/") {
			assert.Contains(t, served, "/"+u, "%s is served", u)
		}
	}
	css := asset(t, "status.css")
	for _, banned := range []string{"url(", "@import", "@font-face"} {
		assert.NotContains(t, css, banned)
	}
	js := strings.ReplaceAll(asset(t, "status.js"), "'http://www.w3.org/2000/svg'", "") // a namespace name, never fetched
	for _, banned := range []string{"http://", "https://", "//cdn", "import("} {
		assert.NotContains(t, js, banned)
	}
}

// Worker-provided strings (ids, URLs, model names) must never be parsed as
// markup: the script writes text only.
func TestScriptWritesNoMarkup(t *testing.T) {
	js := asset(t, "status.js")
	for _, banned := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('style'", "createContextualFragment"} {
		assert.NotContains(t, js, banned)
	}
	assert.Contains(t, js, "textContent")
}
