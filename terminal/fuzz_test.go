package terminal

import (
	"net/netip"
	"testing"
	"time"
)

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "120", "99999999999999999999", "Wed, 21 Oct 2015 07:28:00 GMT", "x"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d := parseRetryAfter(s, now)
		if d < 0 || d > maxRetryAfter || d%time.Second != 0 {
			t.Fatalf("parseRetryAfter(%q) = %v", s, d)
		}
	})
}

func FuzzCheckDialAddress(f *testing.F) {
	for _, s := range []string{"127.0.0.1:80", "[::1]:80", "93.184.216.34:443", "[64:ff9b::a9fe:a9fe]:80", "[fe80::1%eth0]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := checkDialAddress("tcp", s, nil)
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			if err == nil {
				t.Fatalf("unparsable %q allowed", s)
			}
			return
		}
		ip := ap.Addr().Unmap()
		if err == nil && (ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast()) {
			t.Fatalf("%q allowed", s)
		}
	})
}

func FuzzParseEndpoint(f *testing.F) {
	for _, s := range []string{"https://example.com/x", "http://", "ftp://x", "/rel", "http://[::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, reason := parseEndpoint(s)
		if (u == nil) == (reason == "") {
			t.Fatalf("parseEndpoint(%q) = %v, %q", s, u, reason)
		}
		if u != nil {
			// What is sent is u.String(): it must be valid too.
			if _, r := parseEndpoint(u.String()); r != "" {
				t.Fatalf("accepted %q, but its re-encoding %q is invalid: %s", s, u, r)
			}
		}
	})
}
