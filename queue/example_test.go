package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/stepwell/stepwell/queue"
)

// Opening a store in memory: the same name is the same store for the life
// of the process. For tests.
func ExampleOpen_memory() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-open")
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close(ctx)
	if err := q.Put(ctx, []byte("greeting"), []byte("hello")); err != nil {
		log.Fatal(err)
	}
	v, _ := q.Get(ctx, []byte("greeting"))
	fmt.Println(string(v))
	// Output: hello
}

// Opening a store on local disk: every commit is fsynced, and an OS lock
// keeps a second process out.
func ExampleOpen_file() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "stepwell-example-")
	defer os.RemoveAll(dir)

	q, err := queue.Open(ctx, "file://"+dir)
	if err != nil {
		log.Fatal(err)
	}
	r, _ := q.Enqueue(ctx, "emails", []byte("to: ada@example.com"), queue.EnqueueOptions{})
	q.Close(ctx)

	// Everything committed is there after a restart.
	q, err = queue.Open(ctx, "file://"+dir)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close(ctx)
	jobs, _ := q.Claim(ctx, "emails", queue.ClaimOptions{})
	fmt.Println(jobs[0].ID == r.JobID, string(jobs[0].Payload))
	// Output: true to: ada@example.com
}

// Opening a store in a bucket. Each cloud scheme needs its driver's
// import, for example import _ "github.com/stepwell/stepwell/queue/s3"
// (queue/gcs, queue/azblob); without it Open fails with ErrInvalidURL.
// Credentials come from the cloud SDKs' default chains; prefix must end
// in "/".
func ExampleOpen_buckets() {
	ctx := context.Background()
	for _, url := range []string{
		"s3://my-bucket?prefix=stepwell/&region=eu-west-1",
		"s3://my-bucket?prefix=stepwell/&endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true", // MinIO
		"gs://my-bucket?prefix=stepwell/",
		"azblob://my-container?prefix=stepwell/",
	} {
		q, err := queue.Open(ctx, url, queue.WithHeartbeat(2e9))
		if err != nil {
			log.Printf("open %s: %v", url, err)
			continue
		}
		defer q.Close(ctx)
	}
}

// A transaction settles a claimed job, enqueues its successor and writes a
// record, all or nothing.
func ExampleTxn() {
	ctx := context.Background()
	q, _ := queue.Open(ctx, "mem://example-txn")
	defer q.Close(ctx)
	q.Enqueue(ctx, "steps", []byte("step 0"), queue.EnqueueOptions{})
	jobs, _ := q.Claim(ctx, "steps", queue.ClaimOptions{})

	txn := new(queue.Txn).
		Ack(jobs[0]).
		Enqueue("steps", []byte("step 1"), queue.EnqueueOptions{DedupKey: "order-7:1"}).
		Put([]byte("orders/7"), []byte("step 1 queued"))
	res, err := q.Commit(ctx, txn)
	if err != nil {
		log.Fatal(err)
	}
	next, _ := q.Claim(ctx, "steps", queue.ClaimOptions{})
	fmt.Println(next[0].ID == res.Enqueued[0].JobID, string(next[0].Payload))
	// Output: true step 1
}

// Pulling jobs by hand: Claim takes up to Max jobs, and with Wait it waits
// for one (until ctx ends). Work is the usual way to run jobs: it renews
// their leases, which Claim does not, so a job claimed by hand is settled
// within its lease (WithLease).
func ExampleQueue_Claim() {
	ctx := context.Background()
	q, _ := queue.Open(ctx, "mem://example-claim", queue.WithLease(time.Minute))
	defer q.Close(ctx)
	for _, to := range []string{"ada", "grace", "edsger"} {
		q.Enqueue(ctx, "emails", []byte("to: "+to), queue.EnqueueOptions{})
	}
	jobs, err := q.Claim(ctx, "emails", queue.ClaimOptions{Max: 2})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range jobs {
		fmt.Println(string(j.Payload))
		q.Ack(ctx, j)
	}

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	jobs, err = q.Claim(wctx, "emails", queue.ClaimOptions{Max: 2, Wait: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(jobs), string(jobs[0].Payload))
	q.Nack(ctx, jobs[0], errors.New("mailbox full"), time.Minute) // retried in a minute
	// Output:
	// to: ada
	// to: grace
	// 1 to: edsger
}

// A queue limit: at most 2 jobs of "emails" claimed at once, in every
// process of the store; the others wait, pending, and spend no attempt.
func ExampleQueue_SetLimit() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-limit")
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close(ctx)
	if err := q.SetLimit(ctx, "emails", queue.Limit{MaxRunning: 2}); err != nil {
		log.Fatal(err)
	}
	for _, to := range []string{"ada", "grace", "alan"} {
		if _, err := q.Enqueue(ctx, "emails", []byte("to: "+to), queue.EnqueueOptions{}); err != nil {
			log.Fatal(err)
		}
	}
	jobs, _ := q.Claim(ctx, "emails", queue.ClaimOptions{Max: 3})
	s, _ := q.Stats(ctx, "emails")
	fmt.Println(len(jobs), "claimed,", s.Pending, "pending, throttled:", s.Throttled)

	_ = q.Ack(ctx, jobs[0]) // a claim ends: one more fits
	more, _ := q.Claim(ctx, "emails", queue.ClaimOptions{Max: 3})
	fmt.Println(len(more), "claimed:", string(more[0].Payload))
	// Output:
	// 2 claimed, 1 pending, throttled: true
	// 1 claimed: to: alan
}

// How long the store takes to make a commit durable: the WAL writes'
// durations between two readings of the counters. Each commit waits for
// one such write (group commit shares it among concurrent ones), so a
// slow tail here is a slow tail of every commit.
func ExampleDurationHistogram() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "mem://example-durations") // file:// or a bucket: the same
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close(ctx)

	before := q.StorageStats()
	for i := range 20 {
		if err := q.Put(ctx, fmt.Appendf(nil, "key-%d", i), []byte("v")); err != nil {
			log.Fatal(err)
		}
	}
	w := q.StorageStats().WALWrites.Sub(before.WALWrites)
	p50, p99 := w.Quantile(0.5), w.Quantile(0.99)
	fmt.Println(w.Count(), "writes;", p50 > 0 && p50 <= p99)
	// Output: 20 writes; true
}
