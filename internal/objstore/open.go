package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Schemes Open understands.
const (
	schemeMem   = "mem"
	schemeFile  = "file"
	schemeS3    = "s3"
	schemeGCS   = "gs"
	schemeAzure = "azblob"
)

// cloudParams lists, per cloud scheme, the query parameters Open accepts
// (those of gocloud.dev v0.47's URL openers, plus "prefix") and, of those,
// the ones that identify the store for Canonical.
var cloudParams = map[string]struct {
	allowed  []string
	identity []string
}{
	schemeS3: {
		allowed: []string{
			"prefix",
			// gocloud.dev/blob/s3blob
			"ssetype", "kmskeyid", "accelerate", "use_path_style", "s3ForcePathStyle", "disable_https",
			// gocloud.dev/aws.V2ConfigFromURLParams
			"region", "endpoint", "profile", "hostname_immutable", "dualstack", "fips",
			"rate_limiter_capacity", "anonymous", "role",
			"request_checksum_calculation", "response_checksum_validation", "awssdk",
		},
		identity: []string{"endpoint"},
	},
	schemeGCS: {
		allowed:  []string{"prefix", "access_id", "private_key_path", "anonymous", "universe_domain", "grpc", "zonal"},
		identity: []string{"universe_domain"},
	},
	schemeAzure: {
		allowed:  []string{"prefix", "domain", "protocol", "cdn", "localemu", "storage_account"},
		identity: []string{"storage_account", "domain"},
	},
}

// location is a parsed and validated store URL.
type location struct {
	scheme string
	// name is the mem store name, the bucket or container name, or (file)
	// the cleaned absolute directory.
	name string
	// prefix is "" or a key prefix ending in "/".
	prefix string
	// query holds the cloud driver's parameters, without "prefix".
	query url.Values
	// display is the URL for error messages, with any user info redacted.
	display string
}

// Open opens the store named by rawURL. The URL forms and their parameters
// are described in the package documentation. A malformed URL, an unknown
// scheme or parameter, or a cloud configuration error is an error wrapping
// ErrInvalidURL; so is an s3:// URL with no AWS region from the URL, the
// environment or the AWS config, and a cloud URL whose driver the program
// does not link (the error names the package to import: queue/s3,
// queue/gcs or queue/azblob). Open does not contact cloud services; a
// missing bucket or bad credentials show up on the first operation.
func Open(ctx context.Context, rawURL string) (Bucket, error) {
	loc, err := parseLocation(rawURL)
	if err != nil {
		return nil, err
	}
	switch loc.scheme {
	case schemeMem:
		return openMem(loc), nil
	case schemeFile:
		return openFile(loc)
	}
	return openGocloud(ctx, loc)
}

// Canonical returns a string identifying the store rawURL names, for
// in-process registries: URLs naming the same store give the same string.
// It validates rawURL like Open but touches nothing, and needs no driver:
// it works for cloud URLs whose driver the program does not link.
//
// The forms are "mem://NAME/PREFIX", "file:///ABS/DIR" (symbolic links in
// the existing part of the path resolved) and "SCHEME://BUCKET/PREFIX",
// followed for cloud stores by the parameters that select a different
// service (s3: endpoint; gs: universe_domain; azblob: storage_account,
// domain). Credentials, transport options and environment variables (such
// as STORAGE_EMULATOR_HOST) are not part of the identity.
func Canonical(rawURL string) (string, error) {
	loc, err := parseLocation(rawURL)
	if err != nil {
		return "", err
	}
	switch loc.scheme {
	case schemeMem:
		return "mem://" + loc.name + "/" + loc.prefix, nil
	case schemeFile:
		return (&url.URL{Scheme: schemeFile, Path: resolvePath(loc.name)}).String(), nil
	}
	s := loc.scheme + "://" + loc.name + "/" + loc.prefix
	id := url.Values{}
	for _, p := range cloudParams[loc.scheme].identity {
		if v := loc.query.Get(p); v != "" {
			id.Set(p, v)
		}
	}
	if len(id) > 0 {
		s += "?" + id.Encode()
	}
	return s, nil
}

// redactUserInfo returns raw with everything between its scheme and its
// last '@' (what may be user info) replaced by "xxxxx", for a message
// about a URL that did not parse as one with user info.
func redactUserInfo(raw string) string {
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return raw
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + len("://")
	} else if i := strings.Index(raw, ":"); i >= 0 && i < at {
		start = i + 1
	}
	return raw[:start] + "xxxxx" + raw[at:]
}

// parseLocation parses and validates rawURL. Errors wrap ErrInvalidURL.
func parseLocation(rawURL string) (*location, error) {
	display := rawURL
	invalid := func(format string, args ...any) error {
		return opErr("open", display, fmt.Errorf("%w: "+format, append([]any{ErrInvalidURL}, args...)...))
	}
	// Messages name the URL as given ("mem://" stays "mem://", not the
	// "mem:" that re-rendering it gives), except for what may be user
	// info: a password must not reach a log.
	mayHoldUser := strings.Contains(rawURL, "@")
	u, err := url.Parse(rawURL)
	if err != nil {
		if mayHoldUser {
			// The parser's message may quote part of a password (an
			// invalid port ":abc" from "AKID:abc/def@bucket").
			display = redactUserInfo(rawURL)
			return nil, invalid("malformed URL (user info is not allowed)")
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, invalid("%v", err)
	}
	if u.User != nil {
		display = u.Redacted()
	}
	switch {
	case u.Scheme == "":
		return nil, invalid("missing scheme (want mem://, file://, s3://, gs:// or azblob://)")
	case u.Opaque != "" && mayHoldUser: // "s3:AKID:pw@bucket": user info the parser did not see
		display = redactUserInfo(rawURL)
		return nil, invalid("want %s://...", u.Scheme)
	case u.Opaque != "":
		return nil, invalid("want %s://..., not %s:%s", u.Scheme, u.Scheme, u.Opaque)
	case u.User != nil:
		return nil, invalid("user info is not allowed")
	case u.Fragment != "" || strings.HasSuffix(rawURL, "#"):
		return nil, invalid("fragment is not allowed")
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, invalid("query: %v", err)
	}
	for k, vs := range query {
		if len(vs) > 1 {
			return nil, invalid("query parameter %q given more than once", k)
		}
	}
	loc := &location{scheme: u.Scheme, display: display}

	if u.Scheme == schemeFile {
		switch {
		case u.Host != "" && u.Host != "localhost":
			return nil, invalid("file URL host must be empty or localhost, got %q (a relative path? use file:///absolute/dir)", u.Host)
		case u.Path == "":
			return nil, invalid("missing directory path (use file:///absolute/dir)")
		case !strings.HasPrefix(u.Path, "/"):
			return nil, invalid("directory path %q is not absolute", u.Path)
		case len(query) > 0:
			return nil, invalid("file URLs take no query parameters")
		}
		loc.name = filepath.Clean(u.Path)
		return loc, nil
	}

	var allowed []string
	switch u.Scheme {
	case schemeMem:
		allowed = []string{"prefix"}
	case schemeS3, schemeGCS:
		allowed = slices.Concat(cloudParams[u.Scheme].allowed, timeoutParams)
	case schemeAzure:
		allowed = cloudParams[u.Scheme].allowed
	default:
		return nil, invalid("unknown scheme %q (want mem, file, s3, gs or azblob)", u.Scheme)
	}
	what := "bucket name"
	if u.Scheme == schemeMem {
		what = "store name"
	}
	switch {
	case u.Host == "":
		return nil, invalid("missing %s (want %s://NAME)", what, u.Scheme)
	case strings.ContainsAny(u.Host, ":[]"):
		return nil, invalid("%s %q must not contain a port (use the endpoint parameter)", what, u.Host)
	case u.Path != "" && u.Path != "/":
		return nil, invalid("path %q is not allowed; use the prefix parameter for a key prefix", u.Path)
	}
	for k := range query {
		if !slices.Contains(allowed, k) {
			return nil, invalid("unknown query parameter %q for %s URLs", k, u.Scheme)
		}
	}
	loc.name = u.Host
	if p, ok := query["prefix"]; ok {
		loc.prefix = p[0]
		if !strings.HasSuffix(loc.prefix, "/") {
			return nil, invalid("prefix %q must end with '/'", loc.prefix)
		}
		if err := validateKey(strings.TrimSuffix(loc.prefix, "/")); err != nil {
			return nil, invalid("prefix %q: %v", loc.prefix, err)
		}
		query.Del("prefix")
	}
	loc.query = query
	return loc, nil
}

// resolvePath resolves symbolic links in the longest existing leading part
// of the absolute, clean path p.
func resolvePath(p string) string {
	rest := ""
	for dir := p; ; {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		} else if !errors.Is(err, os.ErrNotExist) {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}
