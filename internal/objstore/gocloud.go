package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// listPageSize is the page size List asks cloud stores for: the largest
// page S3 and GCS return.
const listPageSize = 1000

// contentType is stored on every cloud object; it also stops gocloud from
// sniffing the content.
const contentType = "application/octet-stream"

// openGocloud opens a cloud bucket through the scheme's registered
// driver (see Register).
func openGocloud(ctx context.Context, loc *location) (Bucket, error) {
	// loc.query has no "prefix": the adapter applies the prefix itself.
	query := cloneValues(loc.query)
	t, err := takeTimeouts(query)
	if err != nil {
		return nil, opErr("open", loc.display, fmt.Errorf("%w: %w", ErrInvalidURL, err))
	}
	open := opener(loc.scheme)
	if open == nil {
		return nil, errNoDriver(loc)
	}
	b, err := open(ctx, OpenParams{Bucket: loc.name, Query: query, Timeouts: t})
	if err != nil {
		return nil, opErr("open", loc.display, fmt.Errorf("%w: %w", ErrInvalidURL, err))
	}
	return newGocloudBucket(b, loc.prefix, b.Close), nil
}

func cloneValues(q url.Values) url.Values {
	out := make(url.Values, len(q))
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// gocloudBucket adapts a *blob.Bucket to Bucket, mapping errors and
// applying the store's key prefix. (blob.PrefixedBucket is not used: it
// closes the bucket it wraps, which mem stores share between handles.)
type gocloudBucket struct {
	b      *blob.Bucket
	prefix string // prepended to every key; "" or ends in "/"
	// closeFn releases b; nil if b is shared (mem stores).
	closeFn func() error
	closed  atomic.Bool
}

func newGocloudBucket(b *blob.Bucket, prefix string, closeFn func() error) *gocloudBucket {
	return &gocloudBucket{b: b, prefix: prefix, closeFn: closeFn}
}

// check rejects use after Close, invalid keys and done contexts. (Not
// every gocloud driver checks the context: memblob does not.)
func (g *gocloudBucket) check(ctx context.Context, op, key string) error {
	if g.closed.Load() {
		return opErr(op, key, ErrClosed)
	}
	if err := validateKey(key); err != nil {
		return opErr(op, key, err)
	}
	if err := ctx.Err(); err != nil {
		return opErr(op, key, err)
	}
	return nil
}

// Get implements Bucket.
func (g *gocloudBucket) Get(ctx context.Context, key string) ([]byte, error) {
	if err := g.check(ctx, "get", key); err != nil {
		return nil, err
	}
	data, err := g.b.ReadAll(ctx, g.prefix+key)
	if err != nil {
		return nil, mapGocloudErr("get", key, err, false)
	}
	return data, nil
}

// NewReader implements Bucket.
func (g *gocloudBucket) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := g.check(ctx, "get", key); err != nil {
		return nil, err
	}
	r, err := g.b.NewReader(ctx, g.prefix+key, nil)
	if err != nil {
		return nil, mapGocloudErr("get", key, err, false)
	}
	return &gocloudReader{r: r, key: key}, nil
}

// Put implements Bucket.
func (g *gocloudBucket) Put(ctx context.Context, key string, data []byte, ifNotExist bool) error {
	if err := g.check(ctx, "put", key); err != nil {
		return err
	}
	err := g.b.WriteAll(ctx, g.prefix+key, data, writerOptions(ifNotExist))
	if err != nil {
		return mapGocloudErr("put", key, err, ifNotExist)
	}
	return nil
}

// NewWriter implements Bucket.
func (g *gocloudBucket) NewWriter(ctx context.Context, key string, ifNotExist bool) (Writer, error) {
	if err := g.check(ctx, "put", key); err != nil {
		return nil, err
	}
	// gocloud aborts a write when its context is cancelled before Close.
	ctx, cancel := context.WithCancel(ctx)
	w, err := g.b.NewWriter(ctx, g.prefix+key, writerOptions(ifNotExist))
	if err != nil {
		cancel()
		return nil, mapGocloudErr("put", key, err, ifNotExist)
	}
	return &gocloudWriter{w: w, cancel: cancel, key: key, ifNotExist: ifNotExist}, nil
}

func writerOptions(ifNotExist bool) *blob.WriterOptions {
	return &blob.WriterOptions{ContentType: contentType, IfNotExist: ifNotExist}
}

// Delete implements Bucket.
func (g *gocloudBucket) Delete(ctx context.Context, key string) error {
	if err := g.check(ctx, "delete", key); err != nil {
		return err
	}
	if err := g.b.Delete(ctx, g.prefix+key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return mapGocloudErr("delete", key, err, false)
	}
	return nil
}

// ModTime implements ModTimer.
func (g *gocloudBucket) ModTime(ctx context.Context, key string) (time.Time, error) {
	if err := g.check(ctx, "head", key); err != nil {
		return time.Time{}, err
	}
	a, err := g.b.Attributes(ctx, g.prefix+key)
	if err != nil {
		return time.Time{}, mapGocloudErr("head", key, err, false)
	}
	return a.ModTime, nil
}

// List implements Bucket. It pages through the listing listPageSize keys
// at a time.
func (g *gocloudBucket) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if g.closed.Load() {
		return nil, opErr("list", prefix, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr("list", prefix, err)
	}
	var out []ObjectInfo
	opts := &blob.ListOptions{Prefix: g.prefix + prefix}
	token := blob.FirstPageToken
	for {
		objs, next, err := g.b.ListPage(ctx, token, listPageSize, opts)
		if err != nil {
			return nil, mapGocloudErr("list", prefix, err, false)
		}
		for _, o := range objs {
			if !o.IsDir {
				out = append(out, ObjectInfo{Key: strings.TrimPrefix(o.Key, g.prefix), Size: o.Size})
			}
		}
		if len(next) == 0 {
			break
		}
		token = next
	}
	// S3 and GCS list in byte order already; other services need not.
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Close implements Bucket.
func (g *gocloudBucket) Close() error {
	if g.closed.Swap(true) || g.closeFn == nil {
		return nil
	}
	if err := g.closeFn(); err != nil {
		return opErr("close", "", err)
	}
	return nil
}

// gocloudReader maps read errors.
type gocloudReader struct {
	r   *blob.Reader
	key string
}

func (r *gocloudReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = mapGocloudErr("read", r.key, err, false)
	}
	return n, err
}

func (r *gocloudReader) Close() error {
	if err := r.r.Close(); err != nil {
		return mapGocloudErr("read", r.key, err, false)
	}
	return nil
}

// gocloudWriter adapts *blob.Writer to Writer.
type gocloudWriter struct {
	w          *blob.Writer
	cancel     context.CancelFunc
	key        string
	ifNotExist bool
	done       bool // Close or Abort was called
}

func (w *gocloudWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, opErr("write", w.key, ErrClosed)
	}
	n, err := w.w.Write(p)
	if err != nil {
		return n, mapGocloudErr("write", w.key, err, w.ifNotExist)
	}
	return n, nil
}

func (w *gocloudWriter) Close() error {
	if w.done {
		return opErr("put", w.key, ErrClosed)
	}
	w.done = true
	err := w.w.Close()
	w.cancel()
	if err != nil {
		return mapGocloudErr("put", w.key, err, w.ifNotExist)
	}
	return nil
}

func (w *gocloudWriter) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	w.cancel()
	_ = w.w.Close() // reports the cancellation; nothing was written
	return nil
}

// mapGocloudErr turns a gocloud error into an *OpError wrapping the matching
// sentinel, or marked transient when gocloud's code says a retry may help.
// The gocloud error stays in the chain for errors.As.
func mapGocloudErr(op, key string, err error, ifNotExist bool) error {
	code := gcerrors.Code(err)
	switch {
	case code == gcerrors.NotFound:
		err = fmt.Errorf("%w: %w", ErrNotFound, err)
	case ifNotExist && (code == gcerrors.FailedPrecondition || code == gcerrors.AlreadyExists):
		// memblob, s3blob (HTTP 412 PreconditionFailed), gcsblob (HTTP
		// 412, gRPC FAILED_PRECONDITION) and azureblob (BlobAlreadyExists,
		// ConditionNotMet) all report a create-only conflict as
		// FailedPrecondition; AlreadyExists is accepted for safety.
		err = fmt.Errorf("%w: %w", ErrExists, err)
	case errors.Is(err, context.Canceled):
		// Not retryable, whatever code the driver gave it.
	case clientError(err):
		// Wrong credentials, a request the server refuses: the same
		// request fails again. (gocloud's s3blob reports them as Unknown.)
		err = &permanentError{err}
	case code == gcerrors.Unknown, code == gcerrors.Internal,
		code == gcerrors.ResourceExhausted, code == gcerrors.DeadlineExceeded:
		// gocloud has no Unavailable code: HTTP 5xx, gRPC UNAVAILABLE,
		// S3's 409 ConditionalRequestConflict and connection failures all
		// arrive as Unknown.
		err = &transientError{err}
	}
	return opErr(op, key, err)
}

// clientError reports whether err carries an HTTP 4xx status that retrying
// the same request cannot fix: 400, 401, 403 and 404 (wrong credentials,
// SignatureDoesNotMatch, InvalidAccessKeyId, AccessDenied, NoSuchBucket),
// but not 408 (timeout), 409 (S3's ConditionalRequestConflict), 429
// (throttling), nor the S3 codes of transient 400s and 403s
// (RequestTimeout, RequestTimeTooSkewed, ExpiredToken: the SDK corrects the
// clock or refreshes the credentials on a retry). The status comes from
// the AWS SDK's response error (HTTPStatusCode) or a Google API error
// (googleapi.Error's Code, which gocloud's gcsblob maps by itself).
func clientError(err error) bool {
	var sc interface{ HTTPStatusCode() int }
	if !errors.As(err, &sc) {
		return false
	}
	status := sc.HTTPStatusCode()
	if status < 400 || status >= 500 || status == 408 || status == 409 || status == 429 {
		return false
	}
	var api interface{ ErrorCode() string }
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "RequestTimeout", "RequestTimeTooSkewed", "ExpiredToken", "TokenRefreshRequired", "SlowDown":
			return false
		}
	}
	return true
}
