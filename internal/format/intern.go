package format

import (
	"sync"
	"sync/atomic"
)

// Names are the strings records repeat: queue names and header keys. A
// decoded name is shared with every earlier decode of the same bytes, so
// that only its first costs an allocation. The table is bounded: a store
// with more distinct names than internMax, or a name over internLen
// bytes, gets its strings allocated as any other.
const (
	internMax = 512
	internLen = 64
)

var (
	internTab atomic.Pointer[map[string]string] // read without a lock; replaced whole
	internMu  sync.Mutex                        // serializes replacements
)

// intern returns b as a string, the table's if it holds b.
func intern(b []byte) string {
	if len(b) == 0 || len(b) > internLen {
		return string(b)
	}
	if m := internTab.Load(); m != nil {
		if s, ok := (*m)[string(b)]; ok { // no allocation: a lookup
			return s
		}
	}
	internMu.Lock()
	defer internMu.Unlock()
	old := internTab.Load()
	if old != nil {
		if s, ok := (*old)[string(b)]; ok {
			return s
		}
		if len(*old) >= internMax {
			return string(b)
		}
	}
	// Copy on write: a name is added once, and there are few.
	m := make(map[string]string, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	s := string(b)
	m[s] = s
	internTab.Store(&m)
	return s
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// Name reads a string that records repeat (a queue's name), shared with
// earlier reads of the same name (see intern).
func (r *Reader) Name() string { return intern(r.StringBytes()) }
