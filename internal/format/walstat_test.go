package format_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stepwell/stepwell/internal/format"
)

// TestWALBreakdown accounts for the WAL of a file:// store left by a run
// (docs/BENCHMARKS.md, "What a transition writes"): every batch of its
// segments, each mutation classed by its key with run and job IDs and
// sequence numbers replaced by *, and the bytes of each class (key, value
// as stored, msgpack framing). Run it on a store written by, for
// example, stepwell bench --store file:///tmp/s --runs 2000 (fewer runs
// than a snapshot's worth of WAL, so that no segment was collected):
//
//	STEPWELL_WAL_DIR=/tmp/s go test -run TestWALBreakdown -v ./internal/format/
func TestWALBreakdown(t *testing.T) {
	dir := os.Getenv("STEPWELL_WAL_DIR")
	if dir == "" {
		t.Skip("STEPWELL_WAL_DIR not set")
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "wal", "*.log"))
	sort.Strings(segs)
	id := regexp.MustCompile(`^([0-9A-Z]{6,}|bench-.*|[0-9]{6,})$`)
	class := func(k string) string {
		parts := strings.Split(k, "/")
		for i, p := range parts {
			if id.MatchString(p) {
				parts[i] = "*"
			}
		}
		return strings.Join(parts, "/")
	}
	type acc struct{ n, key, val, frame int }
	stats := map[string]*acc{}
	var batches, txns, objBytes, decoded, records int
	for _, s := range segs {
		data, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		first, _ := strconv.ParseUint(strings.TrimSuffix(filepath.Base(s), ".log"), 10, 64)
		objs, err := format.ScanSegment(data, first, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			b, err := format.DecodeBatch(o)
			if err != nil {
				t.Fatal(err)
			}
			batches++
			txns += int(b.Txns)
			objBytes += len(o)
			decoded += format.FramedHeaderLen + format.BatchBodyLen(o)
			records += format.SegmentRecordLen(len(o))
			for _, m := range b.Muts {
				c := fmt.Sprintf("%s %s", map[uint8]string{format.OpPut: "put", format.OpDelete: "delete"}[m.Op], class(m.Key))
				a := stats[c]
				if a == nil {
					a = &acc{}
					stats[c] = a
				}
				a.n++
				a.key += len(m.Key)
				a.val += len(m.Value)
				// The mutation's msgpack framing as written today (records
				// written before compact integers took one byte more).
				a.frame += len(format.AppendBytes(format.AppendString(format.AppendUint8(format.AppendArrayLen(nil, 3), m.Op), m.Key), m.Value)) - len(m.Key) - len(m.Value)
			}
		}
	}
	t.Logf("%d batches, %d transactions; batches %d bytes as written, %d decoded; segment records (headers, padding) %d bytes",
		batches, txns, objBytes, decoded, records)
	keys := make([]string, 0, len(stats))
	for k := range stats {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := stats[keys[i]], stats[keys[j]]
		return a.key+a.val+a.frame > b.key+b.val+b.frame
	})
	for _, k := range keys {
		a := stats[k]
		t.Logf("%-50s %7d  key %5.1f  value %6.1f  framing %4.1f  total %9d",
			k, a.n, float64(a.key)/float64(a.n), float64(a.val)/float64(a.n), float64(a.frame)/float64(a.n), a.key+a.val+a.frame)
	}
}
