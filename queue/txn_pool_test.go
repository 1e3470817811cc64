package queue

import (
	"fmt"
	"sync"
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

// A commit's result is the caller's: the commit's state goes back to a
// pool (commitStates) and the next commits reuse it, so a result that
// pointed into it would change under its caller. Many goroutines commit
// an enqueue each, and each checks after all have committed that its
// result still names its own job.
func TestCommitResultOutlivesCommitState(t *testing.T) {
	q, _ := openJobs(t)
	const workers, rounds = 8, 40
	type kept struct {
		res     TxnResult
		payload string
	}
	results := make([][]kept, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				payload := fmt.Sprintf("w%d-r%d", w, r)
				res, err := q.Commit(t0ctx, new(Txn).Enqueue("q", []byte(payload), EnqueueOptions{}))
				if err != nil {
					t.Error(err)
					return
				}
				results[w] = append(results[w], kept{res, payload})
			}
		})
	}
	wg.Wait()
	ids := map[string]bool{}
	for w := range workers {
		for _, k := range results[w] {
			if len(k.res.Enqueued) != 1 {
				t.Fatalf("%s: %d enqueue results, want 1", k.payload, len(k.res.Enqueued))
			}
			id := k.res.Enqueued[0].JobID
			if ids[id] {
				t.Fatalf("%s: job %s named by two results", k.payload, id)
			}
			ids[id] = true
			j, err := q.GetJob(t0ctx, id)
			if err != nil || string(j.Payload) != k.payload {
				t.Fatalf("%s: its result names job %s: %+v, %v", k.payload, id, j, err)
			}
		}
	}
}
