package format

// Fast codecs, for the external tests in codec_test.go.
var (
	AppendBatchBody   = appendBatch
	ReadBatchBody     = readBatch
	AppendMetaBody    = appendSnapshotMeta
	ReadMetaBody      = readSnapshotMeta
	AppendEntriesBody = appendEntries
	ReadEntriesBody   = readEntries
	AppendEndBody     = appendSnapshotEnd
	ReadEndBody       = readSnapshotEnd
)
