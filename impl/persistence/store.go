package persistence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	clockpkg "github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/protocol/journal"
)

// Bucket layout of the bbolt file:
//
//	events/<pid>/<seq as big-endian uint64> -> record (see encodeRecord)
//	epochs/<pid>                            -> current writer epoch, big-endian uint64
//	meta/global                             -> last Global handed out, big-endian uint64
//
// Big-endian keys sort numerically, so the last key of a pid's bucket is its
// highest sequence number and a cursor walks events in order.
var (
	bucketEvents = []byte("events")
	bucketEpochs = []byte("epochs")
	bucketMeta   = []byte("meta")
	// bucketFenceTokens holds, per pid, a bucket of fence token → the
	// epoch that fence gave (the last fenceTokensKept of them).
	bucketFenceTokens = []byte("fence-tokens")
	keyGlobal         = []byte("global")
)

// recordVersion prefixes every stored event so the encoding can change later
// without misreading old files.
const recordVersion byte = 1

// recordHeader is version + epoch + global + written (unix nanoseconds).
const recordHeader = 1 + 8 + 8 + 8

// defaultLockTimeout bounds how long Open waits for the file lock, so a
// second journal on the same file fails with an error instead of hanging.
const defaultLockTimeout = 2 * time.Second

// StoreOptions configure Open.
type StoreOptions struct {
	// NoSync skips fsync on commit. Unsafe: a crash may lose acknowledged
	// events. Meant for tests and benchmarks only.
	NoSync bool
	// Clock stamps journal.Event.Written; nil means time.Now.
	Clock func() time.Time
	// LockTimeout bounds the wait for the file lock held by another process;
	// zero means 2s.
	LockTimeout time.Duration
}

// Store is the bbolt-backed journal.Journal. It is safe for concurrent use: bbolt
// serializes write transactions, which is exactly the ordering Append needs.
type Store struct {
	db    *bolt.DB
	clock func() time.Time
}

var _ journal.Journal = (*Store)(nil)

// Open opens (creating if missing) the journal file at path.
func Open(path string, opts StoreOptions) (*Store, error) {
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = defaultLockTimeout
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, NoSync: opts.NoSync})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open journal %s: file is locked by another process: %w", path, err)
		}
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketEvents, bucketEpochs, bucketMeta, bucketFenceTokens} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	clock := opts.Clock
	if clock == nil {
		clock = clockpkg.Machine{}.Now
	}
	return &Store{db: db, clock: clock}, nil
}

// Close closes the file; it waits for running transactions to finish.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close journal: %w", err)
	}
	return nil
}

// Append implements journal.Journal. The whole append is one bbolt write transaction,
// so the checks (sequence, epoch) and the writes are atomic with respect to
// every other writer, and a failed commit leaves nothing behind.
func (s *Store) Append(ctx context.Context, pid string, expectedSeq int64, epoch uint64, data [][]byte) (int64, error) {
	if err := journal.ValidateAppend(pid, expectedSeq, data); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var last int64
	err := s.db.Update(func(tx *bolt.Tx) error {
		if epoch != journal.NoEpoch {
			current := getUint64(tx.Bucket(bucketEpochs), []byte(pid))
			if epoch < current {
				return fmt.Errorf("%w: pid %q: epoch %d is older than current epoch %d", journal.ErrFenced, pid, epoch, current)
			}
		}
		events, err := tx.Bucket(bucketEvents).CreateBucketIfNotExists([]byte(pid))
		if err != nil {
			return fmt.Errorf("create bucket for pid %q: %w", pid, err)
		}
		highest, err := highestIn(events)
		if err != nil {
			return err
		}
		if expectedSeq != journal.AnySeq && expectedSeq != highest {
			return fmt.Errorf("%w: pid %q: expected seq %d, highest is %d", journal.ErrSeqConflict, pid, expectedSeq, highest)
		}
		meta := tx.Bucket(bucketMeta)
		global := getUint64(meta, keyGlobal)
		if uint64(len(data)) > math.MaxUint64-global || int64(len(data)) > math.MaxInt64-highest {
			return fmt.Errorf("pid %q: sequence space exhausted", pid)
		}
		written := s.clock().UnixNano()
		// Sequential keys: filling pages to the brim is fine, nothing is
		// ever inserted in the middle.
		events.FillPercent = 1.0
		seq := highest
		for _, d := range data {
			seq++
			global++
			if err := events.Put(seqKey(seq), encodeRecord(epoch, global, written, d)); err != nil {
				return fmt.Errorf("put pid %q seq %d: %w", pid, seq, err)
			}
		}
		if err := putUint64(meta, keyGlobal, global); err != nil {
			return err
		}
		last = seq
		return nil
	})
	if err != nil {
		return 0, err
	}
	return last, nil
}

// Replay implements journal.Journal.
func (s *Store) Replay(ctx context.Context, pid string, from int64, max int) ([]journal.Event, error) {
	if err := journal.ValidatePID(pid); err != nil {
		return nil, err
	}
	if max < 0 {
		return nil, fmt.Errorf("%w: negative max %d", journal.ErrInvalid, max)
	}
	if from < 1 {
		from = 1
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := []journal.Event{}
	err := s.db.View(func(tx *bolt.Tx) error {
		events := tx.Bucket(bucketEvents).Bucket([]byte(pid))
		if events == nil {
			return nil
		}
		c := events.Cursor()
		for k, v := c.Seek(seqKey(from)); k != nil; k, v = c.Next() {
			if max > 0 && len(out) >= max {
				return nil
			}
			// A long replay holds a read transaction; give up early if
			// nobody is waiting for the answer any more.
			if len(out)%1024 == 1023 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			ev, err := decodeRecord(pid, k, v)
			if err != nil {
				return err
			}
			out = append(out, ev)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Fence implements journal.Journal: it raises the epoch by one in a write
// transaction, so two concurrent fences get distinct epochs.
func (s *Store) Fence(ctx context.Context, pid string) (uint64, int64, error) {
	return s.FenceOnce(ctx, pid, "")
}

// fenceTokensKept is how many of a pid's latest fence tokens are
// remembered: a repeat older than that raises the epoch again, which is
// safe (it only fences), just no longer idempotent.
const fenceTokensKept = 16

// FenceOnce implements journal.OnceFencer: Fence, except that a repeat of a fence
// with the same token (a retry whose first attempt was applied but whose
// answer was lost, possibly arriving after the retry) returns the epoch
// that fence gave instead of raising it again, so a writer is never fenced
// by its own request. An empty token is a plain Fence.
func (s *Store) FenceOnce(ctx context.Context, pid, token string) (uint64, int64, error) {
	if err := journal.ValidatePID(pid); err != nil {
		return 0, 0, err
	}
	if err := validateFenceToken(token); err != nil {
		return 0, 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	var epoch uint64
	var highest int64
	err := s.db.Update(func(tx *bolt.Tx) error {
		var tokens *bolt.Bucket
		if token != "" {
			var err error
			if tokens, err = tx.Bucket(bucketFenceTokens).CreateBucketIfNotExists([]byte(pid)); err != nil {
				return fmt.Errorf("create fence-token bucket for pid %q: %w", pid, err)
			}
			epoch = getUint64(tokens, []byte(token))
		}
		if epoch == 0 { // a new fence
			epochs := tx.Bucket(bucketEpochs)
			current := getUint64(epochs, []byte(pid))
			if current == math.MaxUint64 {
				return fmt.Errorf("pid %q: epoch space exhausted", pid)
			}
			epoch = current + 1
			if err := putUint64(epochs, []byte(pid), epoch); err != nil {
				return err
			}
			if tokens != nil {
				if err := putUint64(tokens, []byte(token), epoch); err != nil {
					return err
				}
				if err := forgetOldTokens(tokens, epoch); err != nil {
					return err
				}
			}
		}
		var err error
		highest, err = highestIn(tx.Bucket(bucketEvents).Bucket([]byte(pid)))
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return epoch, highest, nil
}

// forgetOldTokens deletes the tokens of fences more than fenceTokensKept
// epochs before epoch.
func forgetOldTokens(tokens *bolt.Bucket, epoch uint64) error {
	if epoch <= fenceTokensKept {
		return nil
	}
	var old [][]byte
	err := tokens.ForEach(func(k, v []byte) error {
		if len(v) == 8 && binary.BigEndian.Uint64(v) <= epoch-fenceTokensKept {
			old = append(old, slices.Clone(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range old {
		if err := tokens.Delete(k); err != nil {
			return fmt.Errorf("forget fence token: %w", err)
		}
	}
	return nil
}

// validateFenceToken: empty, or 1 to 64 letters, digits, '-' and '_'.
func validateFenceToken(token string) error {
	if len(token) > 64 {
		return fmt.Errorf("%w: fence token of %d bytes exceeds 64", journal.ErrInvalid, len(token))
	}
	for _, r := range token {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("%w: fence token %q: want letters, digits, '-' and '_'", journal.ErrInvalid, token)
		}
	}
	return nil
}

// Highest implements journal.Journal.
func (s *Store) Highest(ctx context.Context, pid string) (int64, error) {
	if err := journal.ValidatePID(pid); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var highest int64
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		highest, err = highestIn(tx.Bucket(bucketEvents).Bucket([]byte(pid)))
		return err
	})
	if err != nil {
		return 0, err
	}
	return highest, nil
}

// highestIn returns the last sequence number in a pid bucket (nil: 0).
func highestIn(events *bolt.Bucket) (int64, error) {
	if events == nil {
		return 0, nil
	}
	k, _ := events.Cursor().Last()
	if k == nil {
		return 0, nil
	}
	return parseSeqKey(k)
}

func seqKey(seq int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(seq))
}

func parseSeqKey(k []byte) (int64, error) {
	if len(k) != 8 {
		return 0, fmt.Errorf("corrupt journal: sequence key of %d bytes", len(k))
	}
	seq := binary.BigEndian.Uint64(k)
	if seq == 0 || seq > math.MaxInt64 {
		return 0, fmt.Errorf("corrupt journal: sequence key %d out of range", seq)
	}
	return int64(seq), nil
}

func getUint64(b *bolt.Bucket, key []byte) uint64 {
	v := b.Get(key)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func putUint64(b *bolt.Bucket, key []byte, v uint64) error {
	if err := b.Put(key, binary.BigEndian.AppendUint64(nil, v)); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	return nil
}

func encodeRecord(epoch, global uint64, written int64, data []byte) []byte {
	buf := make([]byte, 0, recordHeader+len(data))
	buf = append(buf, recordVersion)
	buf = binary.BigEndian.AppendUint64(buf, epoch)
	buf = binary.BigEndian.AppendUint64(buf, global)
	buf = binary.BigEndian.AppendUint64(buf, uint64(written))
	return append(buf, data...)
}

// decodeRecord copies the payload out: bbolt values are only valid inside
// their transaction.
func decodeRecord(pid string, k, v []byte) (journal.Event, error) {
	seq, err := parseSeqKey(k)
	if err != nil {
		return journal.Event{}, err
	}
	if len(v) < recordHeader || v[0] != recordVersion {
		return journal.Event{}, fmt.Errorf("corrupt journal: pid %q seq %d: bad record header", pid, seq)
	}
	return journal.Event{
		PersistenceID: pid,
		Seq:           seq,
		Epoch:         binary.BigEndian.Uint64(v[1:9]),
		Global:        binary.BigEndian.Uint64(v[9:17]),
		Written:       time.Unix(0, int64(binary.BigEndian.Uint64(v[17:25]))),
		Data:          append([]byte{}, v[recordHeader:]...),
	}, nil
}
