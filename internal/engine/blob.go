package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stepwell/stepwell/internal/objstore"
)

// PutBlob stores a large value in its own object and returns the encoded
// reference to put in a transaction. The object is written (durably) before
// the transaction that refers to it; if that transaction never commits, the
// object is an orphan that DiscardBlob or the sweep at the next Open removes.
func (e *Engine) PutBlob(ctx context.Context, data []byte) ([]byte, error) {
	if e.readOnly {
		return nil, ErrReadOnly
	}
	e.mu.Lock()
	if err := e.usableLocked(); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	e.blobSeq++
	n := e.blobSeq
	e.mu.Unlock()
	key := fmt.Sprintf("blob/%020d-%010d", e.epoch, n)
	deadline := time.Now().Add(e.opts.WriteRetry)
	for attempt := 0; ; attempt++ {
		err := e.bucket.Put(ctx, key, data, true)
		// The key is unique to this writer, so "exists" means an earlier
		// attempt of ours landed.
		if err == nil || errors.Is(err, objstore.ErrExists) {
			return BlobRef(key, int64(len(data)), sha256.Sum256(data)), nil
		}
		if !objstore.IsRetryable(err) || time.Now().After(deadline) {
			return nil, &WriteError{Key: key, Err: err}
		}
		if err := sleepBackoff(ctx, attempt); err != nil {
			return nil, err
		}
	}
}

// ReadBlob returns a blob's contents. A missing blob is objstore.ErrNotFound
// (the value was replaced meanwhile; callers re-read the key).
func (e *Engine) ReadBlob(ctx context.Context, key string) ([]byte, error) {
	return e.getRetry(ctx, key, time.Now().Add(e.opts.WriteRetry))
}

// DiscardBlob deletes a blob whose transaction did not commit.
func (e *Engine) DiscardBlob(ctx context.Context, ref []byte) {
	if k := blobKeyOf(ref); k != "" {
		_ = e.bucket.Delete(ctx, k)
	}
}

func (e *Engine) deleteBlobs(keys []string) {
	defer e.bg.Done()
	e.deleteKeys(e.bgCtx, keys)
}

// sweepBlobs deletes blobs from earlier writers that no value refers to:
// uploads whose transaction never committed, and blobs whose deletion after
// their value went was cut short by a crash. Blobs of this writer's epoch
// are never touched, so the sweep cannot race new uploads.
func (e *Engine) sweepBlobs() {
	defer e.bg.Done()
	defer close(e.swept)
	ctx := e.bgCtx
	objs, err := e.bucket.List(ctx, "blob/")
	if err != nil || len(objs) == 0 {
		if err != nil && ctx.Err() == nil {
			e.log.Warn("stepwell: listing blobs for the orphan sweep failed", "err", err)
		}
		return
	}
	live := make(map[string]bool)
	e.mu.Lock()
	tree := e.tree.Clone() // scan a copy-on-write clone without the lock
	e.mu.Unlock()
	tree.Ascend(func(it item) bool {
		if k := blobKeyOf(it.val()); k != "" {
			live[k] = true
		}
		return true
	})
	var doomed []string
	for _, o := range objs {
		if live[o.Key] {
			continue
		}
		if ep, ok := blobEpoch(o.Key); ok && ep < e.epoch {
			doomed = append(doomed, o.Key)
		}
	}
	e.deleteKeys(ctx, doomed)
}

func blobEpoch(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, "blob/")
	if !ok {
		return 0, false
	}
	ep, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(ep, 10, 64)
	return n, err == nil
}
