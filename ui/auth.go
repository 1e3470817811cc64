package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
)

// BasicAuth returns an Options.Authorize that lets through the requests
// with HTTP Basic credentials user and password, and answers others 401
// with a challenge (the browser asks for them). Compared in constant
// time.
func BasicAuth(user, password string) func(http.ResponseWriter, *http.Request) bool {
	wantU, wantP := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(password))
	return func(w http.ResponseWriter, r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		gotU, gotP := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if ok && subtle.ConstantTimeCompare(gotU[:], wantU[:])&subtle.ConstantTimeCompare(gotP[:], wantP[:]) == 1 {
			return true
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="stepwell", charset="UTF-8"`)
		http.Error(w, "401 unauthorized: this UI needs a user name and password", http.StatusUnauthorized)
		return false
	}
}

// tokenCookie holds a browser's proof of the token (TokenAuth).
const tokenCookie = "stepwell_auth"

// TokenAuth returns an Options.Authorize that lets through the requests
// that carry token: as "Authorization: Bearer TOKEN" (scripts), or in a
// cookie a browser gets by opening any page once with ?token=TOKEN (the
// URL `stepwell ui` prints); that visit sets the cookie (HttpOnly,
// SameSite=Strict, holding a MAC of the token rather than the token) and
// redirects to the same page without the token in its URL. Others get 401.
func TokenAuth(token string) func(http.ResponseWriter, *http.Request) bool {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("stepwell-ui-auth-cookie"))
	proof := hex.EncodeToString(m.Sum(nil))
	want := sha256.Sum256([]byte("Bearer " + token))
	return func(w http.ResponseWriter, r *http.Request) bool {
		if h := r.Header.Get("Authorization"); h != "" {
			got := sha256.Sum256([]byte(h))
			if subtle.ConstantTimeCompare(got[:], want[:]) == 1 {
				return true
			}
		}
		if c, err := r.Cookie(tokenCookie); err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(proof)) == 1 {
			return true
		}
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet {
			tw, tg := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(t))
			if subtle.ConstantTimeCompare(tw[:], tg[:]) == 1 {
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: proof, Path: "/",
					HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
				u := *r.URL
				q := u.Query()
				q.Del("token")
				u.RawQuery = q.Encode()
				http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
				return false
			}
		}
		http.Error(w, "401 unauthorized: open the URL with ?token=... that `stepwell ui` printed, or send Authorization: Bearer", http.StatusUnauthorized)
		return false
	}
}
