package netio

import (
	"crypto/rand"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// The book is what the links of one pool learn from each other's masters,
// for two rules that one master's own marker cannot decide:
//
//   - what a master serves never goes back. Every continuity check moves
//     its proxy's count in the marker on (a field no other proxy writes,
//     so no other proxy's checks hide it), and every marker check tells
//     each master the highest count of each proxy this proxy saw for every
//     other master's epoch, and the epochs that were retired by a loss. A
//     master whose marker shows a retired epoch, or a count below one seen
//     for its epoch, holds an older copy of its data (swapped out, restored
//     from a backup, a database swapped in): a loss, dated now. Each
//     master keeps what it was told, so a proxy that never saw the newer
//     copy can tell too, once it read the others' tables.
//   - a loss costs only the locks the master may have held: the other
//     masters' records of grant deadlines bound them (quorum.RecordsEnd).
//
// Links call it with their own lock held; it never calls back into a link
// or a cluster.
type book struct {
	id string // this proxy's, in the markers' counts (random per pool)
	mu sync.Mutex
	// settle is the longest settle time any backend's marker reported (the
	// longest backend_timeout of any proxy that used it): a lost master's
	// own marker may be gone with its data, and a grant of a slower proxy
	// may still be on its way to the others for that long.
	settle   time.Duration
	n        int
	backends []bookBackend // by node
	epochs   map[string]*epochSeen
}

// bookBackend is what the book holds of one backend: the latest reading of
// each of its markers (one for a master or a Sentinel group, one per shard
// of a Redis Cluster) and the markers it has now.
type bookBackend struct {
	cluster  bool
	markers  []string // a cluster's shards' markers, as it last said
	readings map[string]quorum.Reading
	tables   time.Time // when a table of this backend was first read
}

// epochSeen is what the book knows of one epoch of some marker: for each
// proxy, the counts of its continuity checks seen (each with when it was
// learned, increasing in both), and since when the epoch is known to be
// retired.
type epochSeen struct {
	counts  map[string][]seqAt
	retired time.Time
	touched time.Time
}

type seqAt struct {
	seq int64
	at  time.Time
}

// Bounds of what the book keeps of epochs.
const (
	bookEpochs    = 64               // epochs told to each master
	bookSeqWindow = 10 * time.Second // sequences learned longer ago than this are kept as one
)

func newBook(n int) *book {
	return &book{id: newProxyID(), n: n, backends: make([]bookBackend, n), epochs: map[string]*epochSeen{}}
}

// newProxyID is a random name for this proxy's counts in the markers.
func newProxyID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// setCluster tells the book that node is a Redis Cluster whose shards'
// markers are now markers: it is a reader only while each has a whole
// reading.
func (b *book) setCluster(node int, markers []string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	bb := &b.backends[node]
	bb.cluster, bb.markers = true, append(bb.markers[:0], markers...)
}

// read records a reading of node's marker at key, and that its table was
// read, with the settle time that marker reported.
func (b *book) read(node int, key string, r quorum.Reading, settle time.Duration) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.settle = max(b.settle, settle)
	bb := &b.backends[node]
	if bb.readings == nil {
		bb.readings = map[string]quorum.Reading{}
	}
	bb.readings[key] = r
	if bb.tables.IsZero() {
		bb.tables = r.Got
	}
}

// end is when every lock node may have held has expired, for a loss at
// lost (see quorum.RecordsEnd), when the other backends' readings tell.
func (b *book) end(node int, lost time.Time, settle time.Duration) (time.Time, bool) {
	if b == nil {
		return time.Time{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	settle = max(settle, b.settle)
	others := make([]quorum.Reading, 0, b.n)
	for i := range b.backends {
		if i == node {
			continue
		}
		if r, ok := b.backends[i].reading(); ok {
			others = append(others, r)
		}
	}
	return quorum.RecordsEnd(b.n, lost, settle, others)
}

// reading is one backend's reading: a cluster's is whole only when every
// shard's is, sent when the earliest was, and bounds what the latest
// deadline among them bounds.
func (bb *bookBackend) reading() (quorum.Reading, bool) {
	if !bb.cluster {
		for _, r := range bb.readings {
			return r, true
		}
		return quorum.Reading{}, false
	}
	if len(bb.markers) == 0 {
		return quorum.Reading{}, false
	}
	var out quorum.Reading
	var latest time.Time
	for i, k := range bb.markers {
		r, ok := bb.readings[k]
		if !ok {
			return quorum.Reading{}, false
		}
		if i == 0 || r.Sent.Before(out.Sent) {
			out.Sent = r.Sent
		}
		if i == 0 {
			out.Whole = true
		}
		out.Whole = out.Whole && r.Whole
		if end := r.Got.Add(r.Left); i == 0 || end.After(latest) {
			latest, out.Got, out.Left = end, r.Got, r.Left
		}
	}
	return out, true
}

// tablesBefore counts the backends other than node whose tables were read
// before at: what a check sent at at could be judged against.
func (b *book) tablesBefore(node int, at time.Time) int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for i := range b.backends {
		if i != node && !b.backends[i].tables.IsZero() && b.backends[i].tables.Before(at) {
			n++
		}
	}
	return n
}

// seen records that proxy's count in epoch was seen at seq at at.
func (b *book) seen(epoch, proxy string, seq int64, at time.Time) {
	if b == nil || epoch == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seenLocked(epoch, proxy, seq, at)
}

func (b *book) epochLocked(epoch string, at time.Time) *epochSeen {
	e := b.epochs[epoch]
	if e == nil {
		e = &epochSeen{counts: map[string][]seqAt{}}
		b.epochs[epoch] = e
	}
	e.touched = at
	return e
}

func (b *book) seenLocked(epoch, proxy string, seq int64, at time.Time) {
	e := b.epochLocked(epoch, at)
	ss := e.counts[proxy]
	if n := len(ss); n > 0 && ss[n-1].seq >= seq {
		return
	}
	ss = append(ss, seqAt{seq, at})
	// Keep one entry older than the window: the highest learned before it.
	i := 0
	for i+1 < len(ss) && at.Sub(ss[i+1].at) > bookSeqWindow {
		i++
	}
	e.counts[proxy] = ss[i:]
}

// retire records that epoch was ended by a loss, learned at at.
func (b *book) retire(epoch string, at time.Time) {
	if b == nil || epoch == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.retireLocked(epoch, at)
}

func (b *book) retireLocked(epoch string, at time.Time) {
	if e := b.epochLocked(epoch, at); e.retired.IsZero() {
		e.retired = at
	}
}

// table takes what a master said it was told of other epochs (pairs of
// "EPOCH|PROXY" and a count, or "EPOCH" and "R"), learned at at.
func (b *book) table(pairs []string, at time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 0; i+1 < len(pairs); i += 2 {
		epoch, proxy, counted := strings.Cut(pairs[i], "|")
		switch {
		case pairs[i+1] == "R":
			b.retireLocked(epoch, at)
		case counted:
			if seq, err := strconv.ParseInt(pairs[i+1], 10, 64); err == nil {
				b.seenLocked(epoch, proxy, seq, at)
			}
		}
	}
	b.pruneLocked()
}

// pruneLocked keeps the epochs touched last, at most four times what is
// told to each master.
func (b *book) pruneLocked() {
	if len(b.epochs) <= 4*bookEpochs {
		return
	}
	type aged struct {
		epoch string
		at    time.Time
	}
	all := make([]aged, 0, len(b.epochs))
	for k, e := range b.epochs {
		all = append(all, aged{k, e.touched})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at.After(all[j].at) })
	for _, a := range all[2*bookEpochs:] {
		delete(b.epochs, a.epoch)
	}
}

// stale reports whether a marker read by a check sent at sent, showing
// epoch and each proxy's count in it, is older than what the book had
// learned before sent: a retired epoch, or a lower count of some proxy's
// checks than one seen.
func (b *book) stale(epoch string, counts map[string]int64, sent time.Time) bool {
	if b == nil || epoch == "" {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.epochs[epoch]
	if e == nil {
		return false
	}
	if !e.retired.IsZero() && e.retired.Before(sent) {
		return true
	}
	for proxy, ss := range e.counts {
		for i := len(ss) - 1; i >= 0; i-- {
			if ss[i].at.Before(sent) {
				if counts[proxy] < ss[i].seq {
					return true
				}
				break
			}
		}
	}
	return false
}

// witnesses returns, for epoch, the highest count of the checks of up to
// max proxies other than self, those learned last first, as pairs of the
// proxy and its count: each is a write the master answered in that epoch,
// so a continuity check that finds a lower one sees an older copy of its
// data (continuity.go). The proxies whose counts moved last are the ones
// whose writes a copy taken since lacks.
func (b *book) witnesses(epoch, self string, max int) []witness {
	if b == nil || epoch == "" || max <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.epochs[epoch]
	if e == nil {
		return nil
	}
	type last struct {
		w  witness
		at time.Time
	}
	all := make([]last, 0, len(e.counts))
	for proxy, ss := range e.counts {
		if proxy == self || len(ss) == 0 {
			continue
		}
		all = append(all, last{witness{proxy, ss[len(ss)-1].seq}, ss[len(ss)-1].at})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at.After(all[j].at) })
	out := make([]witness, 0, min(len(all), max))
	for i := 0; i < len(all) && i < max; i++ {
		out = append(out, all[i].w)
	}
	return out
}

// tell appends what the book knows of the epochs touched last, as the
// marker script's pairs.
func (b *book) tell(args []string) []string {
	if b == nil {
		return args
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	type aged struct {
		epoch string
		e     *epochSeen
	}
	all := make([]aged, 0, len(b.epochs))
	for k, e := range b.epochs {
		all = append(all, aged{k, e})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].e.touched.After(all[j].e.touched) })
	for i, a := range all {
		if i == bookEpochs {
			break
		}
		if !a.e.retired.IsZero() {
			args = append(args, a.epoch, "R")
			continue
		}
		for proxy, ss := range a.e.counts {
			if len(ss) > 0 {
				args = append(args, a.epoch+"|"+proxy, strconv.FormatInt(ss[len(ss)-1].seq, 10))
			}
		}
	}
	return args
}

// epochBefore reports whether epoch a was made before epoch b by the same
// run of a master (its clock, as the marker script wrote it): a marker
// that goes from b back to a shows an older copy of the data.
func epochBefore(a, b string) bool {
	ra, ta, oka := strings.Cut(a, ":")
	rb, tb, okb := strings.Cut(b, ":")
	if !oka || !okb || ra != rb {
		return false
	}
	return epochTime(ta) < epochTime(tb)
}

// epochTime reads an epoch's "seconds.microseconds" as microseconds.
func epochTime(s string) int64 {
	sec, usec, _ := strings.Cut(s, ".")
	a, _ := strconv.ParseInt(sec, 10, 64)
	u, _ := strconv.ParseInt(usec, 10, 64)
	return a*1_000_000 + u
}
