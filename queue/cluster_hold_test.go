package queue

import (
	"context"
	"fmt"
	"testing"

	"github.com/stepwell/stepwell/internal/testenv"
)

// The transactions of one member's call share one WAL write, even with
// the committer idle when the first is applied (commitAll holds it; see
// engine.Hold): otherwise the committer, woken by the first, often
// starts a write before the rest are applied, and the call's reply waits
// for two.
func TestCommitAllSharesOneWrite(t *testing.T) {
	ctx := context.Background()
	q := openT(t, testenv.MemURL(t.Name()))
	l := q.be.(*local)
	for round := range 50 {
		txns := make([][]txnOp, 64)
		for i := range txns {
			txns[i] = new(Txn).Put([]byte(fmt.Sprintf("k%d-%d", round, i)), []byte("v")).ops
		}
		before := q.StorageStats()
		_, errs, _ := l.commitAll(ctx, txns, l.opts, nil)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := q.StorageStats().WALBatches - before.WALBatches; n != 1 {
			t.Fatalf("round %d: 64 transactions of one call took %d WAL writes, want 1", round, n)
		}
	}
}

// A writer turns its linger off at a member's first commit call (see
// engine.SetLinger), and keeps it on until then.
func TestClusterWriterLingerOff(t *testing.T) {
	url := "file://" + t.TempDir()
	ctx := context.Background()
	w := openMember(t, url)
	if err := w.Put(ctx, []byte("w"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	c := w.be.(*clustered)
	c.mu.Lock()
	l := c.loc
	c.mu.Unlock()
	if l == nil {
		t.Fatal("the first member opened is not the writer")
	}
	eng := l.eng
	if !eng.Lingers() {
		t.Fatal("the linger is off before any member called")
	}
	m := openMember(t, url)
	if err := m.Put(ctx, []byte("m"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if eng.Lingers() {
		t.Fatal("the linger is on after a member's commit call")
	}
}
