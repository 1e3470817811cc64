package queue

import (
	"fmt"
	"testing"
)

// A recycled transaction comes back empty, its array's operations zeroed
// (nothing they referred to is kept), and what a committed transaction
// wrote is not touched by the array's next use: a taken transaction
// commits like one made with new.
func TestTxnPoolRecycles(t *testing.T) {
	q, _ := openJobs(t)
	for round := range 50 {
		txn := takeTxn()
		if len(txn.ops) != 0 || cap(txn.ops) < 8 {
			t.Fatalf("round %d: taken transaction has %d operations, room for %d", round, len(txn.ops), cap(txn.ops))
		}
		for i, op := range txn.ops[:cap(txn.ops)] {
			if op.Kind != 0 || op.Key != nil || op.Value != nil || op.Headers != nil || op.Queue != "" {
				t.Fatalf("round %d: operation %d of the array kept %+v", round, i, op)
			}
		}
		// More operations than the pooled array holds, in some rounds.
		n := 1 + round%12
		for i := range n {
			txn.Put(fmt.Appendf(nil, "r%d-k%d", round, i), fmt.Appendf(nil, "v%d", round))
		}
		txn.Enqueue("q", fmt.Appendf(nil, "job-%d", round), EnqueueOptions{Headers: map[string]string{"round": fmt.Sprint(round)}})
		res, err := q.Commit(t0ctx, txn)
		if err != nil {
			t.Fatal(err)
		}
		recycleTxn(txn)
		if len(txn.ops) != 0 {
			t.Fatalf("round %d: a recycled transaction keeps %d operations", round, len(txn.ops))
		}
		// One made with new (room for 4) is not kept: a taken one has room for 8.
		small := new(Txn).Put([]byte("small"), []byte("v"))
		recycleTxn(small)
		if small.ops != nil {
			t.Fatalf("round %d: a recycled transaction with room for %d kept its array", round, cap(small.ops))
		}
		j, err := q.GetJob(t0ctx, res.Enqueued[0].JobID)
		if err != nil || string(j.Payload) != fmt.Sprint("job-", round) || j.Headers["round"] != fmt.Sprint(round) {
			t.Fatalf("round %d: job %+v, %v", round, j, err)
		}
	}
	for round := range 50 {
		for i := range 1 + round%12 {
			if v, err := q.Get(t0ctx, fmt.Appendf(nil, "r%d-k%d", round, i)); err != nil || string(v) != fmt.Sprint("v", round) {
				t.Fatalf("r%d-k%d = %q, %v", round, i, v, err)
			}
		}
	}
}
