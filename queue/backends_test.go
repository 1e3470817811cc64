package queue

import (
	"testing"

	"github.com/stepwell/stepwell/internal/testenv"
)

// The key-value suite and the job restart test on a real S3 server (MinIO)
// and on the GCS emulator.

func TestKVS3(t *testing.T)  { kvSuite(t, func(t *testing.T) string { return testenv.S3(t) }) }
func TestKVGCS(t *testing.T) { kvSuite(t, func(t *testing.T) string { return testenv.GCS(t) }) }

func TestJobsS3(t *testing.T)  { jobsOn(t, testenv.S3) }
func TestJobsGCS(t *testing.T) { jobsOn(t, testenv.GCS) }

func jobsOn(t *testing.T, newURL func(testing.TB) string) {
	old := jobsStore
	jobsStore = newURL
	defer func() { jobsStore = old }()
	for name, test := range map[string]func(*testing.T){
		"EnqueueClaimAck":      TestEnqueueClaimAck,
		"PriorityThenFIFO":     TestPriorityThenFIFO,
		"Dedup":                TestDedup,
		"ScheduledAndBackoff":  TestScheduledAndBackoff,
		"LeaseExpiryAndPoison": TestLeaseExpiryAndPoisonJobs,
		"CancelJob":            TestCancelJob,
		"TxnSettleEnqueueKV":   TestTxnSettleEnqueueKVAtomic,
		"DeadJobsPaging":       TestDeadJobsPaging,
	} {
		t.Run(name, test)
	}
	t.Run("RestartRequeuesClaimsAndKeepsSchedule", func(t *testing.T) {
		restartRequeuesClaims(t, newURL(t))
	})
	t.Run("TakeoverFencesFirstWriter", func(t *testing.T) {
		takeoverFences(t, newURL(t))
	})
}
