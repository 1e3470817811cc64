package engine

import (
	"testing"

	"github.com/stepwell/stepwell/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// engineSuite is the set of engine tests that must pass on every backend.
var engineSuite = map[string]func(*testing.T){
	"PutGetReopen":                   TestPutGetReopen,
	"RollbackAndIndexer":             TestRollbackAndIndexer,
	"GroupCommit":                    TestGroupCommit,
	"SnapshotAndCollection":          TestSnapshotAndCollection,
	"Fencing":                        TestFencing,
	"CorruptWALNamesKey":             TestCorruptWALNamesKey,
	"WALGapIsCorruption":             TestWALGapIsCorruption,
	"CorruptSnapshot":                TestCorruptSnapshot,
	"Ownership":                      TestOwnership,
	"TakeoverFencesIdleWriter":       TestTakeoverFencesIdleWriterByHeartbeat,
	"StaleWriterCannotWriteIntoWAL":  TestStaleWriterCannotWriteIntoCollectedWAL,
	"SnapshotSameSeqKeepsSnapshot":   TestSnapshotSameSeqKeepsSnapshot,
	"FaultInjection":                 TestFaultInjection,
	"OutageOutlastingRetryStaysOpen": TestOutageLongerThanWriteRetryDoesNotClose,
	"TakeoverOfBusyWriter":           TestTakeoverOfBusyWriter,
}

func runOn(t *testing.T, newURL func(testing.TB) string) {
	old := storeURL
	storeURL = func(t *testing.T) string { return newURL(t) }
	defer func() { storeURL = old }()
	for name, test := range engineSuite {
		t.Run(name, test)
	}
}

// TestEngineS3 runs the engine suite against a real S3 server (MinIO).
func TestEngineS3(t *testing.T) { runOn(t, testenv.S3) }

// TestEngineGCS runs the engine suite against the GCS emulator.
func TestEngineGCS(t *testing.T) { runOn(t, testenv.GCS) }
