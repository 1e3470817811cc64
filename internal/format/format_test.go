package format

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"
)

func sampleBatch() *Batch {
	return &Batch{
		Seq: 42, Writer: "01JWRITER", Epoch: 40, UnixNano: 1700000000000000000, Txns: 2,
		Muts: []Mutation{
			{Op: OpPut, Key: "k/a", Value: []byte{0, 'x'}},
			{Op: OpDelete, Key: "k/b"},
		},
	}
}

func TestBatchRoundTrip(t *testing.T) {
	data, err := EncodeBatch(sampleBatch())
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sampleBatch()) {
		t.Fatalf("round trip: got %+v", got)
	}
}

func TestBatchCorruption(t *testing.T) {
	data, _ := EncodeBatch(sampleBatch())
	cases := map[string][]byte{
		"empty":      nil,
		"short":      data[:10],
		"truncated":  data[:len(data)-1],
		"extended":   append(bytes.Clone(data), 0),
		"bad magic":  append([]byte("XTPW"), data[4:]...),
		"wrong kind": append(append([]byte{}, data[:4]...), append([]byte{'S'}, data[5:]...)...),
		"version":    append(append([]byte{}, data[:5]...), append([]byte{9}, data[6:]...)...),
	}
	for i := FramedHeaderLen; i < len(data); i += 7 {
		d := bytes.Clone(data)
		d[i] ^= 0x10
		cases[fmt.Sprintf("flip byte %d", i)] = d
	}
	for name, d := range cases {
		if _, err := DecodeBatch(d); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

func TestBatchRejectsBadOps(t *testing.T) {
	for name, b := range map[string]*Batch{
		"unknown op":       {Seq: 1, Muts: []Mutation{{Op: 9, Key: "k"}}},
		"delete has value": {Seq: 1, Muts: []Mutation{{Op: OpDelete, Key: "k", Value: []byte{1}}}},
	} {
		data, err := EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeBatch(data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

func TestOwnerRoundTrip(t *testing.T) {
	o := &Owner{Writer: "w", Epoch: 7, Beat: 3, Closed: true, Durable: 41, Addr: "127.0.0.1:7420", Secret: []byte{1, 2, 3}}
	data, err := EncodeOwner(o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeOwner(data)
	if err != nil || !reflect.DeepEqual(got, o) {
		t.Fatalf("DecodeOwner = %+v, %v", got, err)
	}
	if _, err := DecodeOwner(data[:len(data)-1]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated owner: %v", err)
	}
}

// An owner object written before Owner.Durable (four fields) still reads,
// with Durable zero; a body of another shape is corrupt.
func TestOwnerV1Body(t *testing.T) {
	body, err := Marshal(&ownerV1{Writer: "w", Epoch: 7, Beat: 3, Closed: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeOwner(EncodeFramed(KindOwner, body))
	want := &Owner{Writer: "w", Epoch: 7, Beat: 3, Closed: true}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeOwner(v1) = %+v, %v; want %+v", got, err, want)
	}
	body, err = Marshal(&struct {
		Writer string
		Epoch  uint64
	}{"w", 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeOwner(EncodeFramed(KindOwner, body)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("two-field owner body: %v, want ErrCorrupt", err)
	}
}

func encodeSnapshot(t testing.TB, n int, valSize int) []byte {
	var buf bytes.Buffer
	sw, err := NewSnapshotWriter(&buf, &SnapshotMeta{Seq: 9, Writer: "w", Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := sw.Add(fmt.Sprintf("key%08d", i), bytes.Repeat([]byte{byte(i)}, valSize)); err != nil {
			t.Fatal(err)
		}
	}
	size, err := sw.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(buf.Len()) {
		t.Fatalf("Finish reported %d bytes, wrote %d", size, buf.Len())
	}
	return buf.Bytes()
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 5000} {
		data := encodeSnapshot(t, n, 300) // 5000 x 300 B spans several frames
		var keys []string
		meta, err := ReadSnapshot(bytes.NewReader(data), func(k string, v []byte) error {
			keys = append(keys, k)
			if len(v) != 300 {
				t.Fatalf("value of %s has %d bytes", k, len(v))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if meta.Seq != 9 || len(keys) != n {
			t.Fatalf("n=%d: meta %+v, %d keys", n, meta, len(keys))
		}
	}
}

func TestSnapshotCorruption(t *testing.T) {
	data := encodeSnapshot(t, 3000, 500)
	noop := func(string, []byte) error { return nil }
	cases := map[string][]byte{
		"empty":          nil,
		"header only":    data[:8],
		"no end frame":   data[:len(data)-20],
		"cut mid-frame":  data[:len(data)/2],
		"trailing bytes": append(bytes.Clone(data), 1, 2, 3),
	}
	for i := 8; i < len(data); i += len(data) / 13 {
		d := bytes.Clone(data)
		d[i] ^= 0x01
		cases[fmt.Sprintf("flip %d", i)] = d
	}
	for name, d := range cases {
		if _, err := ReadSnapshot(bytes.NewReader(d), noop); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

func TestSnapshotKeysOutOfOrder(t *testing.T) {
	var buf bytes.Buffer
	sw, _ := NewSnapshotWriter(&buf, &SnapshotMeta{Seq: 1})
	sw.Add("b", []byte{0})
	sw.Add("a", []byte{0})
	sw.Finish()
	if _, err := ReadSnapshot(&buf, func(string, []byte) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

// TestWriteSeedCorpus keeps the fuzz seed corpora in testdata/ in step with
// the encoders; run with STEPWELL_WRITE_CORPUS=1 to regenerate.
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("STEPWELL_WRITE_CORPUS") == "" {
		t.Skip("set STEPWELL_WRITE_CORPUS=1 to rewrite testdata/fuzz seeds")
	}
	batch, _ := EncodeBatch(sampleBatch())
	owner, _ := EncodeOwner(&Owner{Writer: "w", Epoch: 1, Beat: 2})
	seeds := map[string][]byte{
		"FuzzDecodeBatch/valid":    batch,
		"FuzzDecodeOwner/valid":    owner,
		"FuzzReadSnapshot/valid":   encodeSnapshot(t, 20, 10),
		"FuzzReadSnapshot/empty":   encodeSnapshot(t, 0, 0),
		"FuzzDecodeBatch/trunc":    batch[:len(batch)-2],
		"FuzzReadSnapshot/trunc":   encodeSnapshot(t, 5, 3)[:40],
		"FuzzDecodeOwner/badmagic": []byte("XXXXO\x01\x00\x00"),
	}
	for name, data := range seeds {
		path := filepath.Join("testdata", "fuzz", name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHugeDeclaredLengths: msgpack headers that declare billions of
// elements or bytes must fail fast, not allocate what they claim.
func TestHugeDeclaredLengths(t *testing.T) {
	for _, body := range [][]byte{
		{0x97, 0x01, 0xa1, 'w', 0x01, 0x01, 0xc2, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff}, // Muts: array32 of 4G
		{0x97, 0x01, 0xc6, 0xff, 0xff, 0xff, 0xff},                                    // Writer: bin32 of 4G
		{0x97, 0x01, 0xa1, 'w', 0x01, 0x01, 0xc2, 0x01, 0x91, 0x93, 0x01, 0xdb, 0xff, 0xff, 0xff, 0xf0},
		{0xdd, 0xff, 0xff, 0xff, 0xff},
		{0xdf, 0xff, 0xff, 0xff, 0xff},
	} {
		if _, err := DecodeBatch(EncodeFramed(KindWAL, body)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("body %x: err = %v, want ErrCorrupt", body, err)
		}
	}
}

// TestEncodeBatchRefusesOversizedFrames: a batch whose body exceeds the
// frame limit is refused (its length would not fit the frame header, and
// no reader would accept it) instead of being written unreadable.
func TestEncodeBatchRefusesOversizedFrames(t *testing.T) {
	b := &Batch{Seq: 1, Writer: "w", Muts: []Mutation{{Op: OpPut, Key: "k", Value: make([]byte, 600)}}}
	for _, compress := range []bool{false, true} {
		_, err := encodeBatch(nil, b, 512, compress)
		var tl *BatchTooLargeError
		if !errors.As(err, &tl) || tl.Max != 512 || tl.Size <= 600 {
			t.Fatalf("encodeBatch over the limit (compress %v) = %v, want a BatchTooLargeError", compress, err)
		}
		if _, err := encodeBatch(nil, b, 1024, compress); err != nil {
			t.Fatalf("encodeBatch under the limit (compress %v): %v", compress, err)
		}
	}
}

// A batch is written compressed when that makes it smaller, as is
// otherwise; both versions decode to the same batch, and so do batches
// written before compression (Version 1).
func TestBatchCompression(t *testing.T) {
	repetitive := &Batch{Seq: 7, Writer: "w", Epoch: 2, UnixNano: 3, Txns: 20}
	for i := range 20 {
		repetitive.Muts = append(repetitive.Muts,
			Mutation{Op: OpPut, Key: fmt.Sprintf("k/workflow/runs/run-%03d", i), Value: []byte(strings.Repeat("queue-name/", 8))},
			Mutation{Op: OpDelete, Key: fmt.Sprintf("j/job-%03d", i)})
	}
	random := &Batch{Seq: 8, Writer: "w", Txns: 1, Muts: []Mutation{{Op: OpPut, Key: "k", Value: make([]byte, 300)}}}
	_, _ = rand.Read(random.Muts[0].Value)
	for _, c := range []struct {
		name    string
		b       *Batch
		version byte
	}{{"repetitive", repetitive, VersionCompressed}, {"random", random, Version}} {
		plain, err := EncodeBatchUncompressed(c.b)
		if err != nil {
			t.Fatal(err)
		}
		data, err := EncodeBatch(c.b)
		if err != nil {
			t.Fatal(err)
		}
		if data[5] != c.version || plain[5] != Version {
			t.Errorf("%s: versions %d (compressed) and %d (plain), want %d and %d", c.name, data[5], plain[5], c.version, Version)
		}
		if c.version == VersionCompressed && len(data)*3 > len(plain) {
			t.Errorf("%s: compressed %d bytes, plain %d: want a third or less", c.name, len(data), len(plain))
		}
		for _, d := range [][]byte{data, plain} {
			got, err := DecodeBatch(d)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if !reflect.DeepEqual(got, c.b) {
				t.Fatalf("%s: decoded %+v, want %+v", c.name, got, c.b)
			}
		}
	}
	// A compressed body that is not S2, or decompresses to a bad batch,
	// behind a valid frame: corrupt.
	data, _ := EncodeBatch(repetitive)
	for _, body := range [][]byte{{0xff, 0xff, 0xff}, s2.Encode(nil, []byte{0x93, 0x01})} {
		bad := append([]byte(nil), data[:FramedHeaderLen]...)
		putFrameHeader(bad[headerLen:], body)
		if _, err := DecodeBatch(append(bad, body...)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("compressed body %x: err = %v, want ErrCorrupt", body, err)
		}
	}
}

// encodeSnapshotV1 writes the snapshot encodeSnapshot writes as version 1
// wrote it: the same frames, uncompressed.
func encodeSnapshotV1(n int, valSize int) []byte {
	h := make([]byte, headerLen)
	putHeader(h, KindSnapshot)
	out := h
	frame := func(body []byte) {
		var fh [frameHeaderLen]byte
		putFrameHeader(fh[:], body)
		out = append(append(out, fh[:]...), body...)
	}
	frame(appendSnapshotMeta(nil, &SnapshotMeta{Seq: 9, Writer: "w", Epoch: 3}))
	var entries []Entry
	for i := 0; i < n; i++ {
		entries = append(entries, Entry{Key: fmt.Sprintf("key%08d", i), Value: bytes.Repeat([]byte{byte(i)}, valSize)})
	}
	frame(appendEntries(nil, entries))
	frame(appendSnapshotEnd(nil, &SnapshotEnd{End: true, Count: uint64(n)}))
	return out
}

// Snapshots are written compressed (version 2); those written before
// (version 1) read as they did, to the same entries.
func TestSnapshotCompression(t *testing.T) {
	read := func(data []byte) (*SnapshotMeta, map[string]string) {
		t.Helper()
		got := map[string]string{}
		meta, err := ReadSnapshot(bytes.NewReader(data), func(k string, v []byte) error {
			got[k] = string(v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return meta, got
	}
	z, plain := encodeSnapshot(t, 300, 100), encodeSnapshotV1(300, 100)
	if z[5] != VersionCompressed || plain[5] != Version {
		t.Fatalf("versions %d and %d, want %d and %d", z[5], plain[5], VersionCompressed, Version)
	}
	if len(z)*5 > len(plain) {
		t.Errorf("compressed snapshot %d bytes, plain %d: want a fifth or less", len(z), len(plain))
	}
	m1, e1 := read(z)
	m2, e2 := read(plain)
	if *m1 != *m2 || len(e1) != 300 || !reflect.DeepEqual(e1, e2) {
		t.Fatalf("compressed: %+v, %d entries; plain: %+v, %d entries", m1, len(e1), m2, len(e2))
	}
	// A frame of a compressed snapshot that is not S2 behind a valid
	// frame header: corrupt.
	bad := append([]byte(nil), z[:headerLen]...)
	body := []byte{0xff, 0xff, 0xff}
	var fh [frameHeaderLen]byte
	putFrameHeader(fh[:], body)
	bad = append(append(bad, fh[:]...), body...)
	if _, err := ReadSnapshot(bytes.NewReader(bad), func(string, []byte) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bad compressed frame: err = %v, want ErrCorrupt", err)
	}
}

// AppendBatch appends what EncodeBatch returns, after dst's bytes, which
// it leaves alone, and leaves dst as it was on error.
func TestAppendBatch(t *testing.T) {
	b := &Batch{Seq: 7, Writer: "w", Txns: 2, Muts: []Mutation{
		{Op: OpPut, Key: "k1", Value: bytes.Repeat([]byte("v"), 300)},
		{Op: OpDelete, Key: "k2"},
	}}
	for _, compress := range []bool{false, true} {
		want, err := encodeBatch(nil, b, MaxFrame, compress)
		if err != nil {
			t.Fatal(err)
		}
		for _, dst := range [][]byte{nil, []byte("prefix"), make([]byte, 3, 10000)} {
			keep := string(dst)
			got, err := encodeBatch(dst, b, MaxFrame, compress)
			if err != nil {
				t.Fatal(err)
			}
			if string(got[:len(keep)]) != keep || !bytes.Equal(got[len(keep):], want) {
				t.Fatalf("compress %v, dst %q: appended bytes differ from the encoding", compress, keep)
			}
			if _, err := DecodeBatch(got[len(keep):]); err != nil {
				t.Fatal(err)
			}
			got, err = encodeBatch(dst, b, 100, compress)
			if err == nil || string(got) != keep {
				t.Fatalf("compress %v: over the limit returned %q, %v; want dst, an error", compress, got, err)
			}
		}
	}
}
