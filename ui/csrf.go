package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// Anti-CSRF tokens: the double-submit pattern, signed. A page sets a
// random cookie (csrfCookie: HttpOnly, SameSite=Strict, the handler's
// path) when the browser has none, and each form carries, in a hidden
// field, the MAC of that cookie under the handler's key. A POST is
// acted on only when its field is the MAC of its cookie: a page of
// another site can neither read the cookie nor forge the MAC, and
// SameSite=Strict keeps the browser from sending the cookie with a
// cross-site POST at all. The cross-origin check in ServeHTTP (Origin,
// Sec-Fetch-Site) refuses such a POST before its token is read.
const (
	csrfCookie = "stepwell_csrf"
	csrfField  = "csrf"
)

// csrfToken returns the form token of the request's browser, setting its
// cookie on w when the request has none.
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && validNonce(c.Value) {
		return h.mac(c.Value)
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	nonce := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie, Value: nonce, Path: h.cookiePath(),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	return h.mac(nonce)
}

// checkCSRF reports whether r (a parsed POST) carries the token of its
// cookie.
func (h *handler) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || !validNonce(c.Value) {
		return false
	}
	got := r.PostFormValue(csrfField)
	return got != "" && hmac.Equal([]byte(got), []byte(h.mac(c.Value)))
}

func (h *handler) mac(nonce string) string {
	m := hmac.New(sha256.New, h.csrfKey)
	m.Write([]byte("stepwell-ui-csrf\x00"))
	m.Write([]byte(nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func validNonce(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 24
}

func (h *handler) cookiePath() string {
	if h.opts.BasePath == "" {
		return "/"
	}
	return h.opts.BasePath
}
