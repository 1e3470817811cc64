package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/internal/objstore"
)

// WAL segments. On buckets with preallocated segments (objstore.Segmenter:
// file://) the writer appends its batches to wal/<first seq>.log segments
// (see format.ScanSegment) instead of writing one wal/<seq> object each: a
// write into blocks that are already allocated and durable needs one
// fdatasync, where a new object also needs its allocation and its name
// made durable (about 4 times the latency on the disks measured).
//
// A segment holds consecutive sequences from its first; the WAL is the
// union of wal/<seq> objects and segment records, and recovery reads both.
// Segments are staged in the background, one ahead: zero-filled (or a
// collected segment taken back), then given a header with a fresh random
// nonce, and synced; every record carries the nonce, so nothing left from
// the file's earlier use reads as a record of this one. A batch that finds
// none ready, or that does not fit in one, is written as a wal/<seq>
// object as on other buckets. So is the open marker. A segment becomes
// garbage like WAL objects do, once a snapshot covers its last record.

// segmentSizes bound the sizes of the segments a writer stages new: the
// first is the smallest, so that a short-lived writer (a CLI command, a
// test) zero-fills little; later ones fit the write rate (see fitSize),
// in powers of two times the first, up to max.
var segmentSizes = struct{ first, max int64 }{first: 1 << 20, max: 64 << 20}

// segmentSpan is how long a new segment should last at the rate at which
// the last full one filled. Every byte staged is written twice (zeros,
// then records), and the part of the newest segment that no record
// reaches, and the spare staged one ahead, are written once for nothing:
// a short span keeps that waste small (at most about two spans of WAL
// writes), and leaves the spare a whole span to be staged. A segment
// costs its publication (a link made durable) on the commit path: four
// a second are nothing beside the thousands of fdatasyncs. Under light
// load, where one commit paying it stands out, an idle committer switches
// segments ahead of need (see rotateIdle).
const segmentSpan = 250 * time.Millisecond

// fitSize returns the size of a segment that lasts about segmentSpan when
// used bytes filled the last one in d.
func fitSize(used int64, d time.Duration) int64 {
	size := segmentSizes.first
	for size < segmentSizes.max && (d <= 0 || float64(size) < float64(used)*float64(segmentSpan)/float64(d)) {
		size *= 2
	}
	return min(size, segmentSizes.max)
}

const segSuffix = ".log"

func segKey(first uint64) string { return walKey(first) + segSuffix }

// parseSegKey parses "wal/<20 digits>.log".
func parseSegKey(key string) (uint64, bool) {
	rest, ok := strings.CutSuffix(key, segSuffix)
	if !ok {
		return 0, false
	}
	return parseSeqKey("wal/", rest)
}

// segLog is the writer's segment state. write is called by the committer
// alone; the spare and own are shared with the preparer and collection.
type segLog struct {
	sg  objstore.Segmenter
	log *slog.Logger

	// Committer only.
	cur      stagedSeg // cur.seg nil: no segment; batches go to objects
	curFirst uint64
	curAt    time.Time // when cur took its first record
	off      int64
	buf      []byte
	// failedAt-1 is the sequence whose segment name an idle switch failed
	// to publish (failedAt 0: none): that batch goes to an object, for the
	// name may have been made (see rotateIdle).
	failedAt uint64

	mu        sync.Mutex
	spare     stagedSeg // guarded by mu: staged, unpublished
	preparing bool      // guarded by mu
	closed    bool      // guarded by mu
	nextSize  int64     // guarded by mu
	own       []ownSeg  // guarded by mu: our published segments, in order
	reusable  []ownSeg  // guarded by mu: collected segments to stage again
	reused    int       // guarded by mu: segments staged again (for tests)
	orphans   []string  // guarded by mu: keys of segments whose Publish failed
	retryAt   time.Time // guarded by mu: after a failure, no staging before

	zeroed atomic.Uint64 // bytes of the segments staged new (zero-filled), counted at the call
}

// stageRetry is how long the log waits after a failure to stage a segment
// before it tries again (writing WAL objects meanwhile).
const stageRetry = 5 * time.Second

// stagedSeg is a segment ready for records: its header, with the nonce
// its records carry, is written and synced.
type stagedSeg struct {
	seg   objstore.Segment
	nonce uint64
}

// stageHeader writes and syncs a fresh header into sp (see
// format.AppendSegmentHeader): from then on records of the file's earlier
// uses, and any bytes that look like records, fail the nonce check.
func stageHeader(sp objstore.Segment) (stagedSeg, error) {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	nonce := binary.BigEndian.Uint64(b[:])
	err := sp.WriteAt(format.AppendSegmentHeader(make([]byte, 0, format.SegmentHeaderLen), nonce), 0)
	if err == nil {
		err = sp.Sync()
	}
	return stagedSeg{seg: sp, nonce: nonce}, err
}

type ownSeg struct {
	first uint64
	size  int64
}

// keepReusable bounds the bytes of the collected segments kept for reuse;
// the rest are deleted. In a steady state, the WAL between two snapshots
// (at least Options.SnapshotMinBytes) goes into reused segments: nothing
// is zero-filled.
func keepReusable() int64 { return 2 * segmentSizes.max }

func newSegLog(sg objstore.Segmenter, log *slog.Logger) *segLog {
	return &segLog{sg: sg, log: log, nextSize: segmentSizes.first}
}

// prepare stages the next segment in the background, unless one is staged,
// being staged, or the log is closed. start runs the goroutine (tracked by
// the engine's background WaitGroup).
func (s *segLog) prepare(ctx context.Context, start func(func())) {
	s.mu.Lock()
	if s.spare.seg != nil || s.preparing || s.closed || time.Now().Before(s.retryAt) {
		s.mu.Unlock()
		return
	}
	s.preparing = true
	size := s.nextSize
	var reuse string
	if n := len(s.reusable); n > 0 {
		reuse = segKey(s.reusable[n-1].first)
		s.reusable = s.reusable[:n-1]
	}
	s.mu.Unlock()
	start(func() {
		var sp objstore.Segment
		var err error
		reused := false
		if reuse != "" {
			// Its blocks are allocated and written: no zeros to write.
			if sp, err = s.sg.ReuseSegment(ctx, reuse); err == nil {
				reused = true
			} else if ctx.Err() == nil {
				s.log.Warn("stepwell: reusing a WAL segment failed; staging a new one", "key", reuse, "err", err)
			}
		}
		if !reused {
			s.zeroed.Add(uint64(size)) // counted at the call, as objstore.Counting does
			sp, err = s.sg.NewSegment(ctx, size)
		}
		var st stagedSeg
		if err == nil {
			if st, err = stageHeader(sp); err != nil {
				_ = sp.Close()
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.preparing = false
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("stepwell: staging a WAL segment failed; writing WAL objects meanwhile", "retry_in", stageRetry, "err", err)
			}
			s.retryAt = time.Now().Add(stageRetry)
			return
		}
		if s.closed {
			_ = sp.Close()
			return
		}
		s.spare = st
		if reused {
			s.reused++
		}
	})
}

// takeSpare returns the staged segment if there is one with room for a
// record of need bytes after its header.
func (s *segLog) takeSpare(need int64) (stagedSeg, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.spare
	if sp.seg == nil || sp.seg.Size() < format.SegmentAlign+need {
		return stagedSeg{}, false
	}
	s.spare = stagedSeg{}
	return sp, true
}

// write appends the WAL object data of batch seq to the current segment,
// starting a new one if it is full. It reports false, having written
// nothing, if no segment is at hand: the caller writes an object instead.
// An error with true is final (fenced). An error with false is a failed
// record write or sync: the segment is abandoned (its content from that
// record on is unknown, see Engine.writeWAL) and the caller writes the
// batch as an object.
func (s *segLog) write(ctx context.Context, seq uint64, data []byte, prepare func()) (bool, error) {
	need := int64(format.SegmentRecordLen(len(data)))
	if s.cur.seg != nil && s.off+need > s.cur.seg.Size() {
		s.retire()
	}
	if s.cur.seg == nil {
		if s.failedAt == seq+1 {
			prepare()
			return false, nil
		}
		sp, ok := s.takeSpare(need)
		prepare()
		if !ok {
			return false, nil
		}
		if ok, err := s.begin(ctx, seq, sp); !ok || err != nil {
			return ok, err
		}
	}
	if s.off == format.SegmentAlign {
		s.curAt = time.Now() // its first record: see retire
	}
	s.buf = format.AppendSegmentRecord(s.buf[:0], s.curFirst, s.cur.nonce, data)
	// One request where the bucket can (pwritev2 with RWF_DSYNC): the
	// record is durable when it returns, as after WriteAt then Sync.
	err := s.cur.seg.WriteAtSync(s.buf, s.off)
	if err != nil {
		err = &WriteError{Key: segKey(s.curFirst), Err: err}
		s.log.Warn("stepwell: writing a WAL segment failed; abandoning it and writing the batch as a WAL object", "err", err)
		_ = s.cur.seg.Close()
		s.cur = stagedSeg{}
		s.mu.Lock()
		s.own[len(s.own)-1].size = 0 // delete it when collected: never reuse it
		s.retryAt = time.Now().Add(stageRetry)
		s.mu.Unlock()
		return false, err
	}
	s.off += int64(len(s.buf))
	if cap(s.buf) > 1<<20 {
		s.buf = nil // do not keep a rare huge batch's buffer
	}
	return true, nil
}

// retire closes the current segment, full or nearly: every record in it
// is synced. The next segment staged new lasts about segmentSpan at the
// rate at which this one filled.
func (s *segLog) retire() {
	_ = s.cur.seg.Close()
	s.cur = stagedSeg{}
	size := fitSize(s.off, time.Since(s.curAt))
	s.mu.Lock()
	s.nextSize = size
	s.mu.Unlock()
}

// begin publishes the staged segment sp as the one whose first record is
// batch seq, and makes it current. It reports false, with a nil error, if
// the publication failed: sp is dropped and the caller writes WAL objects
// until the next one is staged. An error is final (fenced).
func (s *segLog) begin(ctx context.Context, seq uint64, sp stagedSeg) (bool, error) {
	if err := sp.seg.Publish(ctx, segKey(seq)); err != nil {
		_ = sp.seg.Close()
		if errors.Is(err, objstore.ErrExists) {
			return true, fmt.Errorf("%w: %s was written by another writer", ErrFenced, segKey(seq))
		}
		s.log.Warn("stepwell: publishing a WAL segment failed; writing a WAL object instead", "err", err)
		// Its name may have been made before the failure: it holds no
		// record, so collection deletes it whenever it runs.
		s.mu.Lock()
		s.orphans = append(s.orphans, segKey(seq))
		s.mu.Unlock()
		return false, nil
	}
	s.cur, s.curFirst, s.off = sp, seq, format.SegmentAlign // records follow the header
	s.curAt = time.Now()
	s.mu.Lock()
	s.own = append(s.own, ownSeg{first: seq, size: sp.seg.Size()})
	s.mu.Unlock()
	return true, nil
}

// idleRotateShare: a committer idle under light load starts the staged
// segment once less than 1/idleRotateShare of the current one is left
// (see rotateIdle).
const idleRotateShare = 8

// idleRotateAfter is how long the committer must have had nothing to write
// before it switches segments (see rotateIdle).
const idleRotateAfter = 2 * time.Millisecond

// rotateDue reports whether rotateIdle would switch segments now: the
// current one is nearly full and a staged one is at hand.
func (s *segLog) rotateDue() bool {
	if s.cur.seg == nil || (s.cur.seg.Size()-s.off)*idleRotateShare > s.cur.seg.Size() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spare.seg != nil
}

// rotateIdle starts the staged segment, as the one whose first record is
// batch seq (the next to be sealed), if the current segment is nearly
// full. The committer calls it when it has had nothing to write for
// idleRotateAfter under light load. A segment's publication makes a name
// durable (a directory sync, about a millisecond here), and the next
// segment is then staged in the background (its zeros written and synced:
// another). When a commit found the segment full, the publication was on
// its path and the staging beside the commits right after it: they were
// the slowest of every segment (every 2.5 s at 20 runs a second). Done in
// a pause, both delay only a commit that comes during them. The price is
// the part of the segment left unused, zeros written for nothing (at most
// an eighth of it). An error is final (fenced).
func (s *segLog) rotateIdle(ctx context.Context, seq uint64, prepare func()) error {
	if !s.rotateDue() {
		return nil
	}
	sp, ok := s.takeSpare(0)
	if !ok {
		return nil
	}
	s.retire()
	prepare()
	ok, err := s.begin(ctx, seq, sp)
	if !ok {
		// The name may have been made (a link whose directory sync
		// failed) or be on its way to deletion as an orphan: batch seq
		// must not publish it again, lest it be taken for another
		// writer's or deleted while in use.
		s.failedAt = seq + 1
	}
	return err
}

// collect takes this writer's segments whose records are all at or below
// seq (every one but the newest, still being written, up to the first that
// reaches past seq): they are kept to be staged again, up to
// keepReusable bytes; it returns the keys of the others, to delete.
func (s *segLog) collect(seq uint64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n+1 < len(s.own) && s.own[n+1].first-1 <= seq {
		n++
	}
	// An orphan's name never becomes one of ours (see failedAt); should it,
	// it is not deleted under the records written into it.
	doomed := slices.DeleteFunc(s.orphans, func(key string) bool {
		return slices.ContainsFunc(s.own, func(o ownSeg) bool { return segKey(o.first) == key })
	})
	s.orphans = nil
	var kept int64
	for _, o := range s.reusable {
		kept += o.size
	}
	for _, o := range s.own[:n] {
		if o.size > 0 && kept+o.size <= keepReusable() && !s.closed {
			s.reusable = append(s.reusable, o)
			kept += o.size
		} else {
			doomed = append(doomed, segKey(o.first))
		}
	}
	s.own = s.own[n:]
	return doomed
}

// close releases the current and the staged segment. The committer must
// have stopped.
func (s *segLog) close() {
	s.mu.Lock()
	s.closed = true
	sp := s.spare
	s.spare = stagedSeg{}
	s.mu.Unlock()
	if sp.seg != nil {
		_ = sp.seg.Close()
	}
	if s.cur.seg != nil {
		_ = s.cur.seg.Close()
		s.cur = stagedSeg{}
	}
}

// walSet is what recovery found under wal/: objects of one batch by
// sequence, and segments by first sequence, loaded on demand.
type walSet struct {
	e       *Engine
	singles map[uint64]int64 // seq -> object size
	segs    []segRef         // sorted by first
	// cur, for a reader, is where its last Refresh left off in the newest
	// segment, if its state is the records before it (see follow).
	cur *format.SegmentCursor
}

type segRef struct {
	first  uint64
	key    string
	loaded bool
	// objs are the WAL objects of its records from first+skip on, in
	// order; a reader that read the records before on an earlier Refresh
	// (see follow) skips them.
	skip uint64
	objs [][]byte
}

// end returns one past the sequence of the segment's last loaded record.
func (sr *segRef) end() uint64 { return sr.first + sr.skip + uint64(len(sr.objs)) }

// obj returns the WAL object of batch seq, which the segment holds.
func (sr *segRef) obj(seq uint64) []byte { return sr.objs[seq-sr.first-sr.skip] }

func (e *Engine) listWAL(ctx context.Context) (*walSet, error) {
	objs, err := e.bucket.List(ctx, "wal/")
	if err != nil {
		return nil, err
	}
	w := &walSet{e: e, singles: make(map[uint64]int64, len(objs))}
	for _, o := range objs {
		if s, ok := parseSeqKey("wal/", o.Key); ok {
			w.singles[s] = o.Size
		} else if s, ok := parseSegKey(o.Key); ok {
			w.segs = append(w.segs, segRef{first: s, key: o.Key})
		}
	}
	// List is sorted by key, and the keys' digits sort as the numbers do.
	return w, nil
}

// load reads segment i. A writer reads strictly (see format.ScanSegment):
// nobody else can be appending. A reader may race the writer: it follows
// segments in place (see follow).
func (w *walSet) load(ctx context.Context, i int) error {
	sr := &w.segs[i]
	if sr.loaded {
		return nil
	}
	if w.e.readOnly {
		if sg, ok := objstore.AsSegmenter(w.e.bucket); ok {
			return w.follow(ctx, sg, i)
		}
	}
	return w.loadWhole(ctx, i)
}

// loadWhole reads segment i in one request.
func (w *walSet) loadWhole(ctx context.Context, i int) error {
	sr := &w.segs[i]
	data, err := w.e.getRetry(ctx, sr.key, deadlineFrom(w.e.opts.WriteRetry))
	if errors.Is(err, objstore.ErrNotFound) {
		return errRaced
	}
	if err != nil {
		return err
	}
	objs, err := format.ScanSegment(data, sr.first, !w.e.readOnly)
	if err != nil {
		return &CorruptionError{Key: sr.key, Err: err}
	}
	sr.keep(objs)
	return nil
}

// keep sets the segment's records, copied together: the buffers they were
// read into, with padding and zeros (most of a segment in use, up to
// segmentSizes.max), go at once.
func (sr *segRef) keep(objs [][]byte) {
	n := 0
	for _, o := range objs {
		n += len(o)
	}
	buf := make([]byte, 0, n)
	for i, o := range objs {
		buf = append(buf, o...)
		objs[i] = buf[len(buf)-len(o):]
	}
	sr.objs, sr.loaded = objs, true
}

// segFor returns the index of the segment that would hold seq (the last
// one starting at or below it), or -1.
func (w *walSet) segFor(seq uint64) int {
	i := len(w.segs) - 1
	for i >= 0 && w.segs[i].first > seq {
		i--
	}
	return i
}

// has reports whether the WAL holds batch seq, loading its segment.
func (w *walSet) has(ctx context.Context, seq uint64) (bool, error) {
	if _, ok := w.singles[seq]; ok {
		return true, nil
	}
	i := w.segFor(seq)
	if i < 0 {
		return false, nil
	}
	if err := w.load(ctx, i); err != nil {
		return false, err
	}
	sr := &w.segs[i]
	return seq >= sr.first+sr.skip && seq < sr.end(), nil
}

// top returns the highest sequence in the WAL (0 if none): of its objects
// and of the records of the newest segment that has any.
func (w *walSet) top(ctx context.Context) (uint64, error) {
	var top uint64
	for s := range w.singles {
		top = max(top, s)
	}
	for i := len(w.segs) - 1; i >= 0 && w.segs[i].first > top; i-- {
		if err := w.load(ctx, i); err != nil {
			return 0, err
		}
		if end := w.segs[i].end(); end > w.segs[i].first {
			top = max(top, end-1)
			break
		}
	}
	return top, nil
}

// batch returns batch seq, which has reported present, and the length of
// its body before compression (format.BatchBodyLen). Safe for concurrent
// use once has has loaded the segments.
func (w *walSet) batch(ctx context.Context, seq uint64) (*format.Batch, int64, error) {
	if _, ok := w.singles[seq]; ok {
		return w.e.readBatch(ctx, seq)
	}
	sr := &w.segs[w.segFor(seq)]
	data := sr.obj(seq)
	b, err := decodeBatch(sr.key, seq, data) // applying it copies what the state keeps
	return b, int64(format.BatchBodyLen(data)), err
}
