package queue

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"

	"github.com/stepwell/stepwell/internal/engine"
	"github.com/stepwell/stepwell/internal/objstore"
)

// Limits of the key-value space.
const (
	// MaxKeySize is the largest KV key, in bytes.
	MaxKeySize = 1024
	// MaxHeaderBytes bounds the total size of a job's headers.
	MaxHeaderBytes = 64 << 10
	// MaxTxnInlineBytes bounds the inline bytes (keys and values stored in
	// the WAL, i.e. below the large-value threshold) of one transaction.
	MaxTxnInlineBytes = 32 << 20
	// DefaultScanLimit is the page size of Scan when ScanOptions.Limit is 0.
	DefaultScanLimit = 100
	// MaxScanLimit is the largest page Scan returns.
	MaxScanLimit = 10000
)

// User keys live under this prefix of the engine's key space; other prefixes
// hold jobs and queue metadata.
const kvSpace = "k/"

// KV is one key and its value.
type KV struct {
	Key   []byte
	Value []byte
}

// Get returns the value of key, or ErrKeyNotFound. A value written by a
// transaction that is not yet durable is returned only once it is.
func (q *Queue) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := q.checkOpen(); err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return q.be.get(ctx, kvSpace+string(key))
}

// Put sets key to value, durably.
func (q *Queue) Put(ctx context.Context, key, value []byte) error {
	_, err := q.Commit(ctx, new(Txn).Put(key, value))
	return err
}

// Delete removes key, durably. Deleting a missing key is not an error.
func (q *Queue) Delete(ctx context.Context, key []byte) error {
	_, err := q.Commit(ctx, new(Txn).Delete(key))
	return err
}

// CompareAndPut sets key to value if its current value equals old; old ==
// nil means the key must be absent (an existing empty value is matched by
// a non-nil empty slice). On mismatch it returns a *ConditionFailedError and
// changes nothing.
func (q *Queue) CompareAndPut(ctx context.Context, key, old, value []byte) error {
	_, err := q.Commit(ctx, new(Txn).CompareAndPut(key, old, value))
	return err
}

// ScanOptions select a page of Scan.
type ScanOptions struct {
	// After resumes a scan: only keys strictly greater are returned. Use the
	// previous page's Next.
	After []byte
	// Limit is the page size. Defaults to DefaultScanLimit; at most
	// MaxScanLimit.
	Limit int
}

// ScanPage is one page of a Scan.
type ScanPage struct {
	Items []KV
	// Next is the key to pass as ScanOptions.After for the next page; nil
	// when this is the last page.
	Next []byte
}

// Scan returns keys with the given prefix in byte order, a page at a time.
func (q *Queue) Scan(ctx context.Context, prefix []byte, opts ScanOptions) (ScanPage, error) {
	if err := q.checkOpen(); err != nil {
		return ScanPage{}, err
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = DefaultScanLimit
	}
	limit = min(limit, MaxScanLimit)
	after := ""
	if opts.After != nil {
		after = kvSpace + string(opts.After)
	}
	items, more, err := q.be.scan(ctx, kvSpace+string(prefix), after, limit)
	if err != nil {
		return ScanPage{}, mapErr(err)
	}
	for i := range items {
		items[i].Key = items[i].Key[len(kvSpace):]
	}
	page := ScanPage{Items: items}
	if more {
		page.Next = bytes.Clone(items[len(items)-1].Key)
	}
	return page, nil
}

func checkKey(key []byte) error {
	if len(key) == 0 {
		return ErrEmptyKey
	}
	if len(key) > MaxKeySize {
		return &TooLargeError{What: "key", Size: len(key), Max: MaxKeySize}
	}
	return nil
}

// get reads one key of the engine's key space and resolves large values.
func (l *local) get(ctx context.Context, key string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		var enc []byte
		err := l.eng.View(ctx, func(r *engine.Reader) error {
			v, ok := r.Get(key)
			if !ok {
				return ErrKeyNotFound
			}
			enc = v
			return nil
		})
		if err != nil {
			return nil, mapErr(err)
		}
		v, err := l.resolve(ctx, enc)
		if errors.Is(err, objstore.ErrNotFound) && attempt < 5 {
			continue // the value was replaced and its blob deleted; read again
		}
		return v, err
	}
}

// resolve returns a copy of the value encoded as enc.
func (l *local) resolve(ctx context.Context, enc []byte) ([]byte, error) {
	d, err := engine.Decode(enc)
	if err != nil {
		return nil, err
	}
	if d.BlobKey == "" {
		return bytes.Clone(d.Data), nil
	}
	return l.eng.ReadBlob(ctx, d.BlobKey)
}

func (l *local) scan(ctx context.Context, prefix, after string, limit int) ([]KV, bool, error) {
	for attempt := 0; ; attempt++ {
		var items []KV
		var encs [][]byte
		more := false
		err := l.eng.View(ctx, func(r *engine.Reader) error {
			r.Ascend(prefix, after, func(k string, v []byte) bool {
				if k == after {
					return true
				}
				if len(items) == limit {
					more = true
					return false
				}
				items = append(items, KV{Key: []byte(k)})
				encs = append(encs, v)
				return true
			})
			return nil
		})
		if err != nil {
			return nil, false, err
		}
		var rerr error
		for i, enc := range encs {
			if items[i].Value, rerr = l.resolve(ctx, enc); rerr != nil {
				break
			}
		}
		if errors.Is(rerr, objstore.ErrNotFound) && attempt < 5 {
			continue
		}
		return items, more, rerr
	}
}

// valueMatches reports whether the encoded value cur holds exactly want.
func valueMatches(cur []byte, want []byte) bool {
	d, err := engine.Decode(cur)
	if err != nil {
		return false
	}
	if d.BlobKey == "" {
		return bytes.Equal(d.Data, want)
	}
	return d.Size == int64(len(want)) && d.Sum == sha256.Sum256(want)
}
