package terminal

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// The SSRF guard.
//
// A webhook URL may come from a run's submitter (the "callback_url" header),
// so the default client must not become a way to reach the machine it runs
// on, its private network, or a cloud metadata service. The guard checks the
// address actually being dialed, in the net.Dialer's Control hook, after
// DNS resolution: a hostname that resolves (or is rebound) to a private
// address is refused as surely as a literal one. The default client also
// ignores HTTP(S)_PROXY, since through a proxy the dialed address would be
// the proxy's and the guard would check nothing.

// forbiddenPrefixes are refused in addition to what the netip predicates
// catch (loopback, private, link-local, multicast, unspecified).
var forbiddenPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network" (RFC 791)
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space, carrier-grade NAT; some cloud metadata services (RFC 6598)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments (RFC 6890)
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1 (RFC 5737)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking (RFC 2544)
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and 255.255.255.255 broadcast
	netip.MustParsePrefix("100::/64"),        // discard-only (RFC 6666)
	netip.MustParsePrefix("2001:db8::/32"),   // documentation (RFC 3849)
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
}

// nat64Prefix and sixToFourPrefix embed an IPv4 address, which is checked
// in turn: 64:ff9b::a9fe:a9fe reaches 169.254.169.254 through a NAT64
// gateway.
var (
	nat64Prefix     = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052
	sixToFourPrefix = netip.MustParsePrefix("2002::/16")    // RFC 3056
	teredoPrefix    = netip.MustParsePrefix("2001::/32")    // RFC 4380; the client address is obfuscated, refuse outright
	ipv4Compatible  = netip.MustParsePrefix("::/96")        // deprecated IPv4-compatible addresses, incl. ::1 and ::
)

// forbiddenReason returns why ip may not be dialed, or "" when it may.
func forbiddenReason(ip netip.Addr) string {
	ip = ip.Unmap() // ::ffff:10.0.0.1 is 10.0.0.1
	switch {
	case !ip.IsValid():
		return "invalid address"
	case ip.IsUnspecified():
		return "unspecified address"
	case ip.IsLoopback():
		return "loopback address"
	case ip.IsPrivate():
		return "private address"
	case ip.IsLinkLocalUnicast():
		return "link-local address"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast address"
	case ip.Zone() != "":
		return "scoped address"
	}
	for _, p := range forbiddenPrefixes {
		if p.Contains(ip) {
			return "reserved address"
		}
	}
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64Prefix.Contains(ip):
			if r := forbiddenReason(netip.AddrFrom4([4]byte(b[12:16]))); r != "" {
				return "NAT64 " + r
			}
		case sixToFourPrefix.Contains(ip):
			if r := forbiddenReason(netip.AddrFrom4([4]byte(b[2:6]))); r != "" {
				return "6to4 " + r
			}
		case teredoPrefix.Contains(ip):
			return "Teredo address"
		case ipv4Compatible.Contains(ip):
			return "IPv4-compatible address"
		}
	}
	return ""
}

// literalHostReason returns why host (a URL's Hostname) names a forbidden
// address without any resolution, or "": an IP literal forbiddenReason
// objects to, or "localhost" and names under ".localhost" (RFC 6761:
// always loopback). Other names are left to the dial-time check.
func literalHostReason(host string) string {
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return fmt.Sprintf("host %q is a loopback name", host)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return ""
	}
	if r := forbiddenReason(ip); r != "" {
		return fmt.Sprintf("host %s is a %s", ip, r)
	}
	return ""
}

// checkDialAddress is the dialer's Control hook: it refuses every address
// forbiddenReason objects to, and every network but TCP. address is the
// resolved "ip:port" about to be dialed.
func checkDialAddress(network, address string, _ syscall.RawConn) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return fmt.Errorf("%w: network %q", ErrForbiddenDestination, network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: unparsable address %q", ErrForbiddenDestination, address)
	}
	if r := forbiddenReason(ap.Addr()); r != "" {
		return fmt.Errorf("%w: %s is a %s", ErrForbiddenDestination, ap.Addr(), r)
	}
	return nil
}

// maxRedirects is how many redirects one delivery attempt follows.
const maxRedirects = 3

// checkRedirect is the default client's redirect policy: at most
// maxRedirects redirects, each to the original host and port (an upgrade
// from http to https on the same host is allowed), never to plain http from
// https, and only 307/308 redirects, which repeat the POST with its body
// (the client turns a POST into a bodiless GET after 301, 302 and 303,
// which would make a receiver's 2xx for the GET look like a delivery).
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > maxRedirects {
		return fmt.Errorf("%w: more than %d redirects", ErrRedirectRefused, maxRedirects)
	}
	orig := via[0]
	if req.Method != orig.Method {
		return fmt.Errorf("%w: redirect changes %s to %s", ErrRedirectRefused, orig.Method, req.Method)
	}
	if !sameOrigin(orig.URL, req.URL) {
		return fmt.Errorf("%w: redirect from %s to another host %s", ErrRedirectRefused, orig.URL.Host, req.URL.Host)
	}
	return nil
}

// sameOrigin reports whether to may be reached by a redirect from from: the
// same scheme, host and port, or an upgrade from http to https on the same
// host with default ports.
func sameOrigin(from, to *url.URL) bool {
	if !strings.EqualFold(from.Hostname(), to.Hostname()) {
		return false
	}
	fs, ts := strings.ToLower(from.Scheme), strings.ToLower(to.Scheme)
	fp, tp := effectivePort(fs, from.Port()), effectivePort(ts, to.Port())
	if fs == ts {
		return fp == tp
	}
	return fs == "http" && ts == "https" && fp == "80" && tp == "443"
}

func effectivePort(scheme, port string) string {
	if port != "" {
		return port
	}
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// newDefaultClient returns the client used when WebhookConfig.Client is nil:
// a transport of its own, no proxy, the SSRF guard on every dial unless
// allowPrivate, and checkRedirect. Its Timeout is 0: each delivery attempt
// is bounded by a context deadline instead.
func newDefaultClient(allowPrivate bool) *http.Client {
	dialer := &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
	}
	if !allowPrivate {
		dialer.Control = checkDialAddress
	}
	transport := &http.Transport{
		Proxy:                  nil, // see the SSRF guard comment above
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  1 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{
		Transport:     transport,
		CheckRedirect: checkRedirect,
	}
}
