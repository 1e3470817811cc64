package testenv

import (
	"fmt"
	"strings"
	"sync/atomic"
)

var memSeq atomic.Int64

// MemURL returns the URL of a fresh, empty in-memory (mem://) store named
// after name (a test's Name, say): mem:// stores live as long as the process,
// so every call gets a name of its own. Slashes in name (subtests) are
// replaced, since a mem:// URL's path is a key prefix.
func MemURL(name string) string {
	name = strings.NewReplacer("/", "_", "?", "_", "#", "_", "%", "_").Replace(name)
	return fmt.Sprintf("mem://%s-%d", name, memSeq.Add(1))
}
