package queue_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/stepwell/stepwell/queue"
)

// Cluster mode: every process of a service opens the store with the same
// URL and WithCluster. The first one is the writer and serves the others
// on Listen; they are members, whose Queue forwards every operation to it,
// and one of them takes over when the writer dies or closes. Here a single
// process finds the store free, so it is the writer. (Within one process,
// a second Open of the store returns another handle on the same writer.)
func ExampleWithCluster() {
	dir, _ := os.MkdirTemp("", "stepwell-example-")
	defer os.RemoveAll(dir)

	// Open waits for a writer to answer, or to become one: bound it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, "file://"+dir, queue.WithCluster(queue.ClusterConfig{
		Listen: "127.0.0.1:0", // processes on one host; across hosts e.g. ":7420" and Advertise
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close(context.Background())
	fmt.Println(q.Role())

	// The API is the same in every role.
	r, err := q.Enqueue(ctx, "emails", []byte("to: ada@example.com"), queue.EnqueueOptions{})
	if err != nil {
		log.Fatal(err)
	}
	jobs, _ := q.Claim(ctx, "emails", queue.ClaimOptions{})
	fmt.Println(jobs[0].ID == r.JobID, string(jobs[0].Payload))
	// Output:
	// writer
	// true to: ada@example.com
}
