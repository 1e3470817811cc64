package objstore

import (
	"sync"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

// memStores holds every mem:// store of the process by name. A store lives
// until the process exits: closing a Bucket does not discard its objects, so
// a later Open of the same name sees them (as a restarted process would see
// a durable store).
var memStores struct {
	mu sync.Mutex
	m  map[string]*blob.Bucket // guarded by mu
}

// openMem returns a new handle on the named in-memory store.
func openMem(loc *location) Bucket {
	memStores.mu.Lock()
	b := memStores.m[loc.name]
	if b == nil {
		if memStores.m == nil {
			memStores.m = make(map[string]*blob.Bucket)
		}
		b = memblob.OpenBucket(nil)
		memStores.m[loc.name] = b
	}
	memStores.mu.Unlock()
	// The shared *blob.Bucket is never closed: other handles use it.
	return newGocloudBucket(b, loc.prefix, nil)
}
