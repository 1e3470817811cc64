package runrec

import (
	"fmt"

	"github.com/stepwell/stepwell/internal/format"
	"github.com/stepwell/stepwell/kvrecord"
)

// Schedules (runtime.Runtime.SetSchedule) are kept one record each:
//
//	workflow/schedules/<name>  Schedule: the schedule, the template of its
//	                           runs and where its ticks stand
//
// A schedule has exactly one tick job at a time: a scheduled job on the
// timers queue of the schedule's step queue (TimersQueue(Schedule.Queue)),
// due at the next tick (NextAt), whose ID the record names (NextJob).
// Every write of the record (SetSchedule, a tick's settlement) is a
// compare-and-put in the transaction that cancels the job it replaces and
// enqueues the next one, so the record and its job never disagree, and a
// tick job that the record no longer names is dropped when it fires.
// DeleteSchedule deletes the record and cancels its job in one
// transaction. A schedule name has no '/' (nor '@'), so the key names one
// record.
const SchedulePrefix = "workflow/schedules/"

// ScheduleKey returns the key of the schedule name's record.
func ScheduleKey(name string) []byte { return []byte(SchedulePrefix + name) }

// Field counts of a Schedule: scheduleFields with the per-key concurrency
// fields, scheduleFieldsV1 (shape 1) without them, as a schedule whose
// Spec has no Concurrency is written (see EncodeSchedule).
const (
	scheduleFields   = 27
	scheduleFieldsV1 = 25
)

// Schedule is a schedule's record. The Spec fields are the template of
// each tick's run (runtime.RunSpec without RunID and StartAt); the state
// fields say where its ticks stand.
type Schedule struct {
	Version uint8
	Name    string
	// Every is the period in ns (ticks at multiples of it since the Unix
	// epoch); 0 for a Cron schedule.
	Every int64
	// Cron is the cron expression ("" for an Every schedule), read in
	// Location.
	Cron string
	// Location is the time zone name of Cron ("": UTC).
	Location     string
	AllowOverlap bool
	// Queue is the step queue of the ticks' runs (RunSpec.Queue, else the
	// step queue of the Runtime that set the schedule); its timers queue
	// carries the tick job. SpecQueue is RunSpec.Queue as given ("" or
	// Queue).
	Queue     string
	SpecQueue string

	Input               []byte
	Headers             map[string]string
	MaxAttempts         uint32
	Priority            int32
	StepTimeout         int64
	HasRetry            bool // RunSpec.Retry was not nil
	RetryMaxAttempts    uint32
	RetryInitialBackoff int64
	RetryMaxBackoff     int64
	RetryMultiplier     float64
	RetryJitter         float64

	// NextAt is the next tick (unix ns), the due time of the job NextJob.
	NextAt  int64
	NextJob string
	// LastRunID is the run of the latest tick that submitted one ("" if
	// none yet), LastAt that tick (unix ns).
	LastRunID string
	LastAt    int64
	// Skipped counts the ticks skipped because the previous run had not
	// ended (AllowOverlap false).
	Skipped uint64
	// UpdatedAt is the time of the record's last write (unix ns).
	UpdatedAt int64

	// Per-key concurrency: RunSpec.Concurrency of the ticks' runs (zero:
	// none). Written only when set; a shape 1 record reads them zero.
	ConcKey   string
	ConcLimit uint32
}

// EncodeSchedule encodes a schedule record (format.Marshal's bytes,
// written without reflection). It sets s.Version. A schedule without a
// concurrency key (ConcKey and ConcLimit zero) is written without those
// fields (shape 1), as before they were added.
func EncodeSchedule(s *Schedule) []byte {
	s.Version = kvrecord.Version
	size := 210 + len(s.Name) + len(s.Cron) + len(s.Location) + len(s.Queue) + len(s.SpecQueue) + len(s.Input) +
		format.StringMapSize(s.Headers) + len(s.NextJob) + len(s.LastRunID) + len(s.ConcKey)
	noConc := s.ConcKey == "" && s.ConcLimit == 0
	n := scheduleFields
	if noConc {
		n = scheduleFieldsV1
	}
	b := format.AppendArrayLen(make([]byte, 0, size), n)
	b = format.AppendUint8(b, s.Version)
	b = format.AppendString(b, s.Name)
	b = format.AppendInt64(b, s.Every)
	b = format.AppendString(b, s.Cron)
	b = format.AppendString(b, s.Location)
	b = format.AppendBool(b, s.AllowOverlap)
	b = format.AppendString(b, s.Queue)
	b = format.AppendString(b, s.SpecQueue)
	b = format.AppendBytes(b, s.Input)
	b = format.AppendStringMap(b, s.Headers)
	b = format.AppendUint32(b, s.MaxAttempts)
	b = format.AppendInt32(b, s.Priority)
	b = format.AppendInt64(b, s.StepTimeout)
	b = format.AppendBool(b, s.HasRetry)
	b = format.AppendUint32(b, s.RetryMaxAttempts)
	b = format.AppendInt64(b, s.RetryInitialBackoff)
	b = format.AppendInt64(b, s.RetryMaxBackoff)
	b = format.AppendFloat64(b, s.RetryMultiplier)
	b = format.AppendFloat64(b, s.RetryJitter)
	b = format.AppendInt64(b, s.NextAt)
	b = format.AppendString(b, s.NextJob)
	b = format.AppendString(b, s.LastRunID)
	b = format.AppendInt64(b, s.LastAt)
	b = format.AppendUint64(b, s.Skipped)
	b = format.AppendInt64(b, s.UpdatedAt)
	if noConc {
		return b
	}
	// Per-key concurrency.
	b = format.AppendString(b, s.ConcKey)
	return format.AppendUint32(b, s.ConcLimit)
}

// noConcBytes are the concurrency fields of a Schedule, zero, as
// EncodeSchedule would write them: "" and a uint32.
var noConcBytes = format.AppendUint32(format.AppendString(nil, ""), 0)

// DecodeSchedule decodes a schedule record, of either shape. Its errors wrap
// kvrecord.ErrCorrupt.
func DecodeSchedule(b []byte) (*Schedule, error) {
	var s Schedule
	if len(b) > 3 && b[0] == 0xdc && b[1] == 0 && b[2] == scheduleFieldsV1 {
		// Shape 1: read as the newest shape with the concurrency fields
		// zero (the decoder wants every field of the struct).
		b = append(append([]byte{0xdc, 0, scheduleFields}, b[3:]...), noConcBytes...)
	}
	if err := format.UnmarshalExact(b, &s); err != nil {
		return nil, fmt.Errorf("%w: schedule: %v", kvrecord.ErrCorrupt, err)
	}
	if s.Version != kvrecord.Version || s.Name == "" {
		return nil, fmt.Errorf("%w: schedule version %d, name %q", kvrecord.ErrCorrupt, s.Version, s.Name)
	}
	return &s, nil
}
