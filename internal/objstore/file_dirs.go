package objstore

import (
	"os"
	"sync"
)

// maxCachedDirs bounds the open directory descriptors a file store keeps.
// The engine writes into a handful of directories (the root, wal/, snap/,
// and the blob prefix), so the bound is only a guard against a caller
// spreading keys over many prefixes.
const maxCachedDirs = 32

// dirCache keeps directories open between writes, so that publishing an
// object names it relative to an open directory (linkat/renameat) and syncs
// that same directory, without opening and closing it every time.
//
// A cached descriptor keeps referring to its directory if the directory is
// removed; creating an entry in a removed directory fails with ENOENT, and
// the writer then evicts the descriptor and opens the path again (see
// fileBucket.publish). The entry a write creates is thus always in the
// directory it syncs.
type dirCache struct {
	mu     sync.Mutex
	m      map[string]*dirHandle // guarded by mu
	closed bool                  // guarded by mu
}

// dirHandle is one open directory. refs counts the writes using it; a handle
// evicted (or left by Close) while in use is closed by its last release.
type dirHandle struct {
	path    string
	f       *os.File
	refs    int  // guarded by dirCache.mu
	evicted bool // guarded by dirCache.mu
}

// acquire returns the open directory dir, opening it if needed with open
// (which may create it). The caller must release it.
func (c *dirCache) acquire(dir string, open func(string) (*os.File, error)) (*dirHandle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if h := c.m[dir]; h != nil {
		h.refs++
		return h, nil
	}
	f, err := open(dir)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]*dirHandle{}
	}
	for k, h := range c.m {
		if len(c.m) < maxCachedDirs {
			break
		}
		c.dropLocked(k, h)
	}
	h := &dirHandle{path: dir, f: f, refs: 1}
	c.m[dir] = h
	return h, nil
}

// release ends a use of h.
func (c *dirCache) release(h *dirHandle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.refs--
	if h.evicted && h.refs == 0 {
		h.f.Close()
	}
}

// evict forgets h (if it is still the cached handle of its path), so that
// the next acquire opens the path again.
func (c *dirCache) evict(h *dirHandle) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[h.path] == h {
		c.dropLocked(h.path, h)
	}
}

// dropLocked removes h from the cache, closing it unless it is in use.
//
// REQUIRES: c.mu held.
func (c *dirCache) dropLocked(path string, h *dirHandle) {
	delete(c.m, path)
	h.evicted = true
	if h.refs == 0 {
		h.f.Close()
	}
}

// close closes every cached directory (those in use when their last user
// releases them); acquire fails with ErrClosed afterwards.
func (c *dirCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for k, h := range c.m {
		c.dropLocked(k, h)
	}
}

// len returns the number of cached directories.
func (c *dirCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
