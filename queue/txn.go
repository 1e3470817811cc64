package queue

import (
	"context"
	"errors"

	"github.com/stepwell/stepwell/internal/engine"
)

// Txn is a set of changes committed atomically by Queue.Commit: all of them
// become durable together, or none does. Build one with new(Txn) and its
// chaining methods. A Txn holds references to the byte slices passed to it
// until Commit returns.
type Txn struct {
	ops []txnOp
}

// txn operation kinds. Part of the wire form of a transaction.
const (
	opPut uint8 = iota + 1
	opDelete
	opCompareAndPut
)

// txnOp is the serializable form of one transaction operation.
type txnOp struct {
	_msgpack struct{} `msgpack:",as_array"`
	Kind     uint8
	Key      []byte
	Value    []byte
	Expect   []byte
	Absent   bool // CompareAndPut: the key must be absent
}

// Put sets key to value.
func (t *Txn) Put(key, value []byte) *Txn {
	t.ops = append(t.ops, txnOp{Kind: opPut, Key: key, Value: value})
	return t
}

// Delete removes key (a missing key is not an error).
func (t *Txn) Delete(key []byte) *Txn {
	t.ops = append(t.ops, txnOp{Kind: opDelete, Key: key})
	return t
}

// CompareAndPut sets key to value if its current value equals old (old ==
// nil: the key must be absent). If the condition fails, Commit returns a
// *ConditionFailedError and the whole transaction changes nothing.
func (t *Txn) CompareAndPut(key, old, value []byte) *Txn {
	t.ops = append(t.ops, txnOp{Kind: opCompareAndPut, Key: key, Value: value, Expect: old, Absent: old == nil})
	return t
}

// Len returns the number of operations.
func (t *Txn) Len() int { return len(t.ops) }

// Commit applies t atomically and returns once it is durable. Validation
// errors (empty or oversized keys, oversized values) are returned before
// anything is written.
func (q *Queue) Commit(ctx context.Context, t *Txn) error {
	if err := q.checkOpen(); err != nil {
		return err
	}
	if len(t.ops) == 0 {
		return nil
	}
	inline := 0
	for i := range t.ops {
		op := &t.ops[i]
		if err := checkKey(op.Key); err != nil {
			return err
		}
		inline += len(op.Key)
		if op.Kind == opPut || op.Kind == opCompareAndPut {
			if len(op.Value) > q.opts.maxValue {
				return &TooLargeError{What: "value", Size: len(op.Value), Max: q.opts.maxValue}
			}
			if len(op.Value) <= q.opts.largeValue {
				inline += len(op.Value)
			}
		}
	}
	if inline > MaxTxnInlineBytes {
		return &TooLargeError{What: "transaction", Size: inline, Max: MaxTxnInlineBytes}
	}
	return mapErr(q.be.commit(ctx, t.ops))
}

func (l *local) commit(ctx context.Context, ops []txnOp) error {
	// Encode values first; large ones are uploaded to their own objects
	// before the transaction that refers to them.
	encs := make([][]byte, len(ops))
	var staged [][]byte
	discard := func() {
		for _, ref := range staged {
			l.eng.DiscardBlob(context.WithoutCancel(ctx), ref)
		}
	}
	for i := range ops {
		op := &ops[i]
		if op.Kind == opDelete {
			continue
		}
		if len(op.Value) > l.opts.largeValue {
			ref, err := l.eng.PutBlob(ctx, op.Value)
			if err != nil {
				discard()
				return err
			}
			staged = append(staged, ref)
			encs[i] = ref
		} else {
			encs[i] = engine.Inline(op.Value)
		}
	}
	err := l.eng.Update(ctx, func(tx *engine.Tx) error {
		for i := range ops {
			op := &ops[i]
			key := kvSpace + string(op.Key)
			switch op.Kind {
			case opPut:
				tx.Put(key, encs[i])
			case opDelete:
				tx.Delete(key)
			case opCompareAndPut:
				cur, ok := tx.Get(key)
				if op.Absent && ok || !op.Absent && (!ok || !valueMatches(cur, op.Expect)) {
					return &ConditionFailedError{Key: op.Key}
				}
				tx.Put(key, encs[i])
			default:
				return errors.New("queue: unknown transaction operation")
			}
		}
		return nil
	})
	var cfe *ConditionFailedError
	if errors.As(err, &cfe) {
		discard() // nothing refers to the staged blobs
	}
	return err
}
