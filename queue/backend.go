package queue

import "context"

// The backends of a Queue, and the small interfaces they implement. A
// Queue calls one backend:
//
//   - *local, the single-process backend (local.go): this process holds
//     the state and is the store's writer, or reads it (WithReadOnly). In
//     cluster mode it is also the writer's side, serving the members
//     (cluster_writer.go).
//   - *remote, the member's side of cluster mode (cluster_member.go and
//     cluster_member_claims.go): every call goes to the writer.
//   - *clustered, the backend of a Queue in cluster mode (cluster.go): it
//     routes each call to a *local or a *remote, whichever this process's
//     role calls for, and switches between them (cluster_failover.go).

// dataBackend reads and changes the state: transactions (enqueues and
// settlements are transactions too), key-value reads and job inspection.
type dataBackend interface {
	commit(ctx context.Context, ops []txnOp, o options) (TxnResult, error)
	get(ctx context.Context, key string) ([]byte, error)
	scan(ctx context.Context, prefix, after string, limit int) ([]KV, bool, error)
	stats(ctx context.Context, queue string) (Stats, error)
	queues(ctx context.Context) ([]string, error)
	limits(ctx context.Context) (map[string]Limit, error)
	getJob(ctx context.Context, id string) (*Job, error)
	deadJobs(ctx context.Context, queue, after string, limit int) ([]*Job, string, error)
	requeueDead(ctx context.Context, id string) error
	// watchKey registers a key watch (watch.go).
	watchKey(ctx context.Context, w *keyWatch) error
	keyWatches() *watchSet
}

// claimBackend claims jobs and keeps their leases.
type claimBackend interface {
	// claim and claimWait claim up to n jobs; with s, only as many as they
	// can take slots of s for. claimWait waits for a job.
	claim(ctx context.Context, queue string, n int, o options, s *slots) ([]*Job, error)
	claimWait(ctx context.Context, queue string, n int, o options, s *slots) ([]*Job, error)
	renew(id string, token uint64, o options) error
	// watch registers w, to be told of its claim's cancel and its loss
	// (see claimWatch); unwatch withdraws it.
	watch(w *claimWatch)
	unwatch(w *claimWatch)
}

// slotBackend registers the slots of Work loops.
type slotBackend interface {
	// addSlots makes a Work loop's slots available to dispatched enqueues;
	// removeSlots withdraws them and stops further takes.
	addSlots(s *slots)
	removeSlots(s *slots)
}

// handoverBackend hands the claims of running jobs from the backend a
// role change replaces to the next one (cluster mode, see
// clustered.switchTo).
type handoverBackend interface {
	// heldClaims lists the claims this process holds; adopt takes over
	// such a list from the backend this one replaces.
	heldClaims() []claimRef
	adopt(refs []claimRef)
}

// lifecycleBackend is the backend's own state: health, storage figures,
// a final error, and its end.
type lifecycleBackend interface {
	// refresh reloads a read-only store; other backends do nothing.
	refresh(ctx context.Context) error
	storageStats() StorageStats
	health() Health
	// err reports the final error that closed the backend, or nil.
	err() error
	close(ctx context.Context) error
}

// backend is all of a Queue's backend.
type backend interface {
	dataBackend
	claimBackend
	slotBackend
	handoverBackend
	lifecycleBackend
}

var (
	_ dataBackend      = (*local)(nil)
	_ claimBackend     = (*local)(nil)
	_ slotBackend      = (*local)(nil)
	_ handoverBackend  = (*local)(nil)
	_ lifecycleBackend = (*local)(nil)

	_ dataBackend      = (*remote)(nil)
	_ claimBackend     = (*remote)(nil)
	_ slotBackend      = (*remote)(nil)
	_ handoverBackend  = (*remote)(nil)
	_ lifecycleBackend = (*remote)(nil)

	_ dataBackend      = (*clustered)(nil)
	_ claimBackend     = (*clustered)(nil)
	_ slotBackend      = (*clustered)(nil)
	_ handoverBackend  = (*clustered)(nil)
	_ lifecycleBackend = (*clustered)(nil)
)
