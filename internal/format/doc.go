// Package format defines Stepwell's on-bucket object formats (WAL batches,
// snapshots and the owner (heartbeat) object) and the encoding of cluster
// messages, with one msgpack reader and writer for both (codec.go,
// fields.go). Everything on the bucket is part of the durable format: the
// constants and layouts below must not change without a new version
// number, and decoders for every released version must be kept.
//
// # Object names
//
//	wal/<seq:020d>    one group-commit batch, written create-only
//	wal/<seq:020d>.log
//	                  a WAL segment: batches seq, seq+1, ... as segment
//	                  records, written in place (stores with preallocated
//	                  segments: file://; see ScanSegment for the layout)
//	snap/<seq:020d>   the whole state as of <seq>, written create-only
//	blob/<epoch:020d>-<n:010d>
//	                  a large value, written before the batch that refers to it
//	owner             the writer's heartbeat (bucket stores without an OS
//	                  lock) and, on every store but mem://, the highest
//	                  WAL sequence it knew durable (Owner.Durable)
//
// # Framed objects (WAL batches and the owner object)
//
//	+-------+------+---------+----------+-------------+-------------+------------------+
//	| magic | kind | version | reserved | body length | CRC-32C     | body             |
//	| STPW  | 1 B  | 1 B     | 2 B = 0  | u32 BE      | u32 BE      | msgpack, length B|
//	+-------+------+---------+----------+-------------+-------------+------------------+
//	0       4      5         6          8             12            16
//
// The object must be exactly 16 + body length bytes long. The CRC (Castagnoli)
// covers the body. kind is 'W' for a WAL batch and 'O' for the owner object.
// A body's field count is part of its version: the decoder refuses a
// struct array of another length, so a new field means a decoder for the
// old shape too (DecodeOwner reads owner objects from before
// Owner.Durable).
//
// # Snapshots
//
// A snapshot is streamed, so it is a header followed by frames:
//
//	+----------------------------+  +--------+--------+---------+  ...  +--------------+
//	| STPW | 'S' | version | 0 0 |  | len u32| crc u32| msgpack |       | end frame    |
//	+----------------------------+  +--------+--------+---------+  ...  +--------------+
//	          8 bytes                  frame (each <= MaxFrame)
//
// The first frame is a SnapshotMeta, then zero or more entry frames (a
// msgpack array of Entry), then an end frame (a SnapshotEnd carrying the
// total entry count). A snapshot without its end frame, with a count that
// disagrees, or with bytes after the end frame is corrupt.
//
// # Record encoding
//
// Bodies and records are msgpack with every struct as an array of its
// fields in declaration order, as Marshal writes them, integers in their
// shortest form (since November 27, 2026: before, each in its type's
// fixed width, which every decoder still reads; see codec.go). The hot ones (WAL
// batches, snapshot frames, and the queue's and runtime's records) are
// written and read without reflection by hand-listed codecs built on
// codec.go, which produce the same bytes; tests compare them with Marshal,
// so a store written by either path reads back with the other.
//
// Every decoder returns an error wrapping ErrCorrupt for any malformed input
// and never panics; fuzz targets in this package keep it so.
//
// # Field-numbered messages
//
// The messages of cluster calls (queue's cluster_messages.go, carried by
// internal/cluster) are never stored: they are exchanged between processes
// that may run different versions, so each struct is a msgpack map from
// small field numbers to values, written with a FieldWriter and read with
// Reader.Numbered:
//
//	+------+-----------+-----+---------+-----+---------+  ...
//	| 0xde | count     | num | value   | num | value   |
//	| map16| u16 BE    | 1 B | msgpack | 1 B | msgpack |
//	+------+-----------+-----+---------+-----+---------+  ...
//	0      1           3     4
//
// A field number is a positive fixint (1 to 127), a value any msgpack
// value: a nested struct is a map of its own, a slice an array of values,
// integers take their shortest form. A field at its zero value (0, false,
// "", a nil slice, map or pointer) is left out; an empty slice or map is
// written, so nil and empty stay apart. A decoder reads the fields in any
// order, skips a number it does not know, and a nil in place of a map
// reads as a struct of no fields: a field added on one side is ignored by
// the other. A number, once used, keeps its meaning; each message lists
// its numbers beside its type.
//
// Decoding never allocates more than the input could hold: a map or array
// header counting more entries than the bytes left is an error, and
// slices (List) start at up to 1024 elements and grow as they are read.
// Byte fields are slices of the message, capped to their length, or
// copies (NewCopyingReader) for a message whose fields outlive its buffer.
package format
