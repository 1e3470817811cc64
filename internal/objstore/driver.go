package objstore

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	"gocloud.dev/blob"
)

// driverImports maps each cloud scheme to the public package whose import
// registers its driver (through internal/objstore/s3drv, gcsdrv, azdrv).
// The mem and file drivers are built in.
var driverImports = map[string]string{
	schemeS3:    "github.com/stepwell/stepwell/queue/s3",
	schemeGCS:   "github.com/stepwell/stepwell/queue/gcs",
	schemeAzure: "github.com/stepwell/stepwell/queue/azblob",
}

// An Opener opens the cloud bucket a validated store URL names. Open wraps
// its errors in ErrInvalidURL; it must not contact the service.
type Opener func(ctx context.Context, p OpenParams) (*blob.Bucket, error)

// OpenParams is what Open passes to an Opener.
type OpenParams struct {
	// Bucket is the bucket or container name (the URL's host).
	Bucket string
	// Query holds the driver's URL parameters, already checked against the
	// scheme's list, without prefix and the timeout parameters. It is the
	// Opener's own copy.
	Query url.Values
	// Timeouts are the transport timeouts from the URL, defaults filled in.
	Timeouts Timeouts
}

var drivers struct {
	mu sync.RWMutex
	m  map[string]Opener // guarded by mu
}

// Register makes Open use open for URLs of scheme, one of "s3", "gs" and
// "azblob". It is called from the init function of the driver packages,
// which programs import through queue/s3, queue/gcs and queue/azblob. It
// panics if open is nil, the scheme is not a cloud scheme, or it already
// has a driver.
func Register(scheme string, open Opener) {
	if open == nil {
		panic("objstore: Register of a nil Opener")
	}
	if _, ok := driverImports[scheme]; !ok {
		panic(fmt.Sprintf("objstore: Register of unknown scheme %q", scheme))
	}
	drivers.mu.Lock()
	defer drivers.mu.Unlock()
	if _, dup := drivers.m[scheme]; dup {
		panic(fmt.Sprintf("objstore: Register called twice for scheme %q", scheme))
	}
	if drivers.m == nil {
		drivers.m = make(map[string]Opener)
	}
	drivers.m[scheme] = open
}

// opener returns the registered Opener of scheme, or nil.
func opener(scheme string) Opener {
	drivers.mu.RLock()
	defer drivers.mu.RUnlock()
	return drivers.m[scheme]
}

// errNoDriver is the error of opening a store whose cloud driver is not
// linked into the program.
func errNoDriver(loc *location) error {
	return opErr("open", loc.display, fmt.Errorf("%w: no driver for %s:// stores in this program: "+
		"import _ %q to enable them", ErrInvalidURL, loc.scheme, driverImports[loc.scheme]))
}
