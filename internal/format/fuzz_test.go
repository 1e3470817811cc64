package format

import (
	"bytes"
	"errors"
	"testing"
)

// The decoders must reject any input that is not a valid object with an
// error wrapping ErrCorrupt, and must never panic. Valid inputs must
// round-trip.

func FuzzDecodeBatch(f *testing.F) {
	data, _ := EncodeBatch(sampleBatch())
	f.Add(data)
	plain, _ := EncodeBatchUncompressed(sampleBatch())
	f.Add(plain)
	long := sampleBatch()
	for range 4 {
		long.Muts = append(long.Muts, long.Muts...)
	}
	compressed, _ := EncodeBatch(long)
	f.Add(compressed) // VersionCompressed
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBatch(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		again, err := EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeBatch(again); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		// AppendBatch appends the same bytes after what dst holds.
		appended, err := AppendBatch(append(make([]byte, 0, 8), "prefix"...), b)
		if err != nil || string(appended[:6]) != "prefix" || !bytes.Equal(appended[6:], again) {
			t.Fatalf("AppendBatch after a prefix differs from EncodeBatch (err %v)", err)
		}
	})
}

func FuzzDecodeOwner(f *testing.F) {
	data, _ := EncodeOwner(&Owner{Writer: "w", Epoch: 1, Beat: 1})
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := DecodeOwner(data); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error does not wrap ErrCorrupt: %v", err)
		}
	})
}

func FuzzReadSnapshot(f *testing.F) {
	f.Add(encodeSnapshot(f, 3, 4))
	f.Add(encodeSnapshotV1(3, 4))
	f.Fuzz(func(t *testing.T, data []byte) {
		var keys []string
		_, err := ReadSnapshot(bytes.NewReader(data), func(k string, v []byte) error {
			keys = append(keys, k)
			return nil
		})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		for i := 1; i < len(keys); i++ {
			if keys[i] <= keys[i-1] {
				t.Fatalf("accepted keys out of order: %q after %q", keys[i], keys[i-1])
			}
		}
	})
}

// FuzzDecodeBatchBody fuzzes the msgpack body behind a valid frame, which
// the checksum would otherwise keep the fuzzer from reaching.
func FuzzDecodeBatchBody(f *testing.F) {
	data, _ := EncodeBatch(sampleBatch())
	f.Add(data[FramedHeaderLen:])
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := DecodeBatch(EncodeFramed(KindWAL, body)); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error does not wrap ErrCorrupt: %v", err)
		}
	})
}

// FuzzSnapshotFrames fuzzes snapshot frame bodies behind valid frame
// checksums.
func FuzzSnapshotFrames(f *testing.F) {
	f.Add([]byte{0x94, 0x01, 0xa1, 'w', 0x01, 0x00}, []byte{0x91, 0x92, 0xa1, 'k', 0xc4, 0x01, 0x00}, []byte{0x92, 0xc3, 0x01})
	f.Fuzz(func(t *testing.T, meta, entries, end []byte) {
		var buf bytes.Buffer
		var h [headerLen]byte
		putHeader(h[:], KindSnapshot)
		buf.Write(h[:])
		for _, body := range [][]byte{meta, entries, end} {
			var fh [frameHeaderLen]byte
			putFrameHeader(fh[:], body)
			buf.Write(fh[:])
			buf.Write(body)
		}
		_, err := ReadSnapshot(&buf, func(string, []byte) error { return nil })
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error does not wrap ErrCorrupt: %v", err)
		}
	})
}
