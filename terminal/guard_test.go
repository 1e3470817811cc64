package terminal

import (
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"testing"
)

// The guard is exercised by calling it directly: no packet leaves loopback.
func TestCheckDialAddressRefuses(t *testing.T) {
	for _, addr := range []string{
		"10.0.0.1:80",             // RFC 1918
		"172.16.5.4:443",          // RFC 1918
		"192.168.1.1:443",         // RFC 1918
		"169.254.169.254:80",      // link-local: cloud metadata
		"169.254.0.1:80",          // link-local
		"127.0.0.1:80",            // loopback
		"127.8.9.10:8080",         // loopback /8
		"[::1]:80",                // IPv6 loopback
		"[fe80::1]:80",            // IPv6 link-local
		"[fe80::1%eth0]:80",       // zoned link-local
		"[fc00::1]:443",           // unique local
		"[fd00:ec2::254]:80",      // AWS IMDS over IPv6 (unique local)
		"0.0.0.0:80",              // unspecified
		"[::]:80",                 // unspecified
		"0.1.2.3:80",              // "this network"
		"224.0.0.1:80",            // multicast
		"[ff02::1]:80",            // IPv6 multicast
		"255.255.255.255:80",      // broadcast
		"100.100.100.200:80",      // CGNAT (Alibaba Cloud metadata)
		"198.18.0.1:80",           // benchmarking
		"[::ffff:10.0.0.1]:80",    // IPv4-mapped private
		"[::ffff:127.0.0.1]:80",   // IPv4-mapped loopback
		"[64:ff9b::a9fe:a9fe]:80", // NAT64 of 169.254.169.254
		"[2002:c0a8:0101::1]:80",  // 6to4 of 192.168.1.1
		"[2001:0:4136:e378:8000:63bf:3fff:fdd2]:80", // Teredo
		"[::10.0.0.1]:80", // IPv4-compatible
		"not-an-address",
		"example.com:443", // unresolved names never reach Control; refuse if they do
	} {
		err := checkDialAddress("tcp", addr, nil)
		if !errors.Is(err, ErrForbiddenDestination) {
			t.Errorf("checkDialAddress(%s) = %v, want ErrForbiddenDestination", addr, err)
		}
	}
}

func TestCheckDialAddressAllowsPublic(t *testing.T) {
	for _, addr := range []string{
		"93.184.216.34:443",
		"8.8.8.8:53",
		"1.1.1.1:443",
		"[2606:2800:220:1:248:1893:25c8:1946]:443",
		"[::ffff:93.184.216.34]:443",
		"[64:ff9b::5db8:d822]:443", // NAT64 of a public address
		"[2002:5db8:d822::1]:443",  // 6to4 of a public address
	} {
		for _, network := range []string{"tcp", "tcp4", "tcp6"} {
			if err := checkDialAddress(network, addr, nil); err != nil {
				t.Errorf("checkDialAddress(%s, %s) = %v, want nil", network, addr, err)
			}
		}
	}
	if err := checkDialAddress("udp", "93.184.216.34:443", nil); !errors.Is(err, ErrForbiddenDestination) {
		t.Errorf("udp allowed: %v", err)
	}
}

func TestForbiddenReasonUnmapsBeforeChecking(t *testing.T) {
	if r := forbiddenReason(netip.MustParseAddr("::ffff:169.254.169.254")); r != "link-local address" {
		t.Errorf("reason %q", r)
	}
}

func TestDefaultClientWiring(t *testing.T) {
	guarded := newDefaultClient(false)
	tr := guarded.Transport.(*http.Transport)
	if tr.Proxy != nil {
		t.Error("default client uses a proxy")
	}
	if guarded.CheckRedirect == nil {
		t.Error("no redirect policy")
	}
	open := newDefaultClient(true)
	if open.CheckRedirect == nil {
		t.Error("no redirect policy with AllowPrivateNetworks")
	}
}

func TestSameOrigin(t *testing.T) {
	u := func(s string) *url.URL { v, _ := url.Parse(s); return v }
	tests := []struct {
		from, to string
		want     bool
	}{
		{"https://a.example/x", "https://a.example/y", true},
		{"https://a.example/x", "https://A.EXAMPLE:443/y", true},
		{"http://a.example/x", "https://a.example/y", true},
		{"https://a.example/x", "http://a.example/y", false},
		{"https://a.example/x", "https://b.example/y", false},
		{"https://a.example/x", "https://a.example:8443/y", false},
		{"http://a.example:8080/x", "https://a.example/y", false},
		{"http://127.0.0.1:1/x", "http://localhost:1/y", false},
	}
	for _, tt := range tests {
		if got := sameOrigin(u(tt.from), u(tt.to)); got != tt.want {
			t.Errorf("sameOrigin(%s, %s) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
}
