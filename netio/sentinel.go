package netio

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// A Sentinel-managed backend. The link of a backend named as a master that
// a group of Sentinels manages (Options.Sentinel) asks every Sentinel of
// the group which master it names (SENTINEL get-master-addr-by-name)
// before each dial, every Interval, and at once when one of them announces
// a switch (+switch-master, to which the link subscribes on each of them)
// or when a subscription connects again. It dials only an address that a
// majority of the configured Sentinels name in one round of questions, and
// it counts the master's votes only while such a round, started less than
// Lease ago, named the address the connection goes to.
//
// Why a majority: two majorities of one set of Sentinels share a Sentinel,
// and a Sentinel never goes back to an older configuration, so every round
// in which a majority named the old master started before any round in
// which a majority named the new one. Why a lease: a proxy that cannot
// reach a majority of the Sentinels cannot tell a Sentinel outage from a
// failover it does not see, while the old master, cut off from the
// Sentinels, may still take writes. So the old master's votes stop
// counting, for every proxy, at most Lease after the new master was first
// named by a majority, which is before any proxy connected to the new
// master and its marker recorded the promotion. The hold of a
// Sentinel-managed backend is max_ttl + drift + Lease (the app adds it),
// so that every lock counted on the old master has expired before the new
// master counts.
//
// Every switch is a loss, dated at the switch, whatever the new master
// says about itself: a failback to an old master that was never demoted
// (still a master, with the same run, replication id and marker) lacks the
// locks granted on the master between. The Sentinels' config epoch of the
// group rises with every failover, so a round confirms an address together
// with its epoch (a majority must name both), and the marker records the
// highest epoch it was checked under: a marker check under a higher one
// records the loss ("switched"), also for a proxy that never saw the
// switch. A new epoch at the same address is a switch as well. And the
// link that sees a switch has the master switched to record it, whatever
// the epochs say, unless its marker shows a loss recorded since: the
// Sentinels that forgot a group (SENTINEL REMOVE and MONITOR, or a restart
// without their saved configuration) name it under epoch 0 again, at a
// master whose marker may show that epoch from before the failover.
//
// The link itself stays: its undos kept for the next connection, its
// quarantine and its record of the backend go with the vote to the new
// master. Earlier connections to the old master are not killed on the new
// one (they are not its clients); a master that the link moves to is
// judged from its own marker (a promotion, a resync), never as "another
// server at the address".

// SentinelOptions name a master that a group of Sentinels manages.
type SentinelOptions struct {
	Addrs []string // the Sentinels, host:port; every proxy must list the same ones
	Name  string   // the master's name in their configuration

	Username string      // AUTH user for the Sentinels (default: none)
	Password string      // AUTH password for the Sentinels (default: none)
	TLS      *tls.Config // talk to the Sentinels over TLS when set

	Interval time.Duration // how often every Sentinel is asked (default DefaultSentinelInterval)
	Timeout  time.Duration // bounds a Sentinel's dial and answer (default 500ms)
	Lease    time.Duration // how long a majority's answer lets the master count (default DefaultSentinelLease)
}

// The defaults of SentinelOptions.
const (
	DefaultSentinelInterval = 500 * time.Millisecond
	DefaultSentinelLease    = 2 * time.Second
)

func (o *SentinelOptions) defaults() {
	if o.Interval <= 0 {
		o.Interval = DefaultSentinelInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = 500 * time.Millisecond
	}
	if o.Lease <= 0 {
		o.Lease = DefaultSentinelLease
	}
}

// SentinelHealth is what Health says of a Sentinel-managed backend.
type SentinelHealth struct {
	Name      string
	Master    string    // the address a majority of the Sentinels named last ("" until one did)
	Confirmed time.Time // until when their answer lets the connected master count (zero: it does not)
	Agree     int       // Sentinels that named Master in the last round
	Reachable int       // Sentinels that answered the last round
	Sentinels int       // Sentinels configured
	Answers   string    // what each Sentinel said in the last round without a majority ("" after a round with one)
	Switches  uint64    // switches of master seen
	From      string    // the master before the last switch
	SwitchAt  time.Time // when the last switch was seen (zero: none)
}

// follower is a link's view of its Sentinels. The link's mu guards the
// fields marked so; askMu serialises rounds of questions, and the query
// connections.
type follower struct {
	opt  SentinelOptions
	wake chan struct{} // a round is wanted now (a switch announced, a subscription reconnected)

	askMu sync.Mutex
	q     []*sentinelConn // the query connection to each Sentinel; nil while there is none

	// Under the link's mu.
	master      string    // named by a majority in the last round that had one
	epoch       int64     // the group's config epoch that majority named with it
	confirmedAt time.Time // start of the last round in which a majority named master
	connAddr    string    // the address the current (or last) connection was dialled to
	connEpoch   int64     // the epoch confirmed when it was made: its marker checks record it
	// A switch is a loss whatever the epochs say (Sentinels that forgot
	// the group name it under epoch 0 again): connSwitches is the count of
	// switches seen when the current connection was made, connSwitchAt
	// when the last of them was seen, and recorded the count a marker
	// check of the master switched to has covered. While they differ,
	// every marker check records a loss unless the marker shows one
	// recorded since the switch was seen (appendMarker).
	connSwitches uint64
	connSwitchAt time.Time
	recorded     uint64
	agree        int
	reachable    int
	answers      string
	switches     uint64
	from         string    // the master before the last switch
	switchAt     time.Time // when it was seen
	pending      string    // the master before a switch not yet logged ("" when none)
	lastNoMaj    string    // the last round without a majority, as logged
	subs         []net.Conn
}

func newFollower(o SentinelOptions) *follower {
	o.defaults()
	return &follower{opt: o, wake: make(chan struct{}, 1), q: make([]*sentinelConn, len(o.Addrs)), subs: make([]net.Conn, len(o.Addrs))}
}

// poke asks for a round now.
func (f *follower) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// sentinelConn is a connection to one Sentinel (or to a Redis Cluster
// node, for the slot map a round asks it for: cluster_confirm.go).
type sentinelConn struct {
	net.Conn
	rd *resp.Reader
}

// dialSentinel connects to a Sentinel and authenticates.
func (f *follower) dialSentinel(ctx context.Context, addr string) (*sentinelConn, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opt.Timeout)
	defer cancel()
	c, err := dialTLS(ctx, addr, f.opt.TLS, func(err error) error { return sentinelHandshakeError(handshakeError(err)) })
	if err != nil {
		return nil, err
	}
	sc := &sentinelConn{Conn: c, rd: resp.NewReader(bufio.NewReaderSize(c, 4<<10), resp.ReaderLimits{MaxBulk: 1 << 20})}
	if f.opt.Password != "" {
		args := []string{"AUTH", f.opt.Password}
		if f.opt.Username != "" {
			args = []string{"AUTH", f.opt.Username, f.opt.Password}
		}
		deadline, _ := ctx.Deadline()
		v, err := sc.do(deadline, args...)
		if err == nil && v.Kind == resp.KindError {
			err = fmt.Errorf("the Sentinel refused the proxy's credentials (sentinel_username, sentinel_password): %s", v.Str)
		}
		if err != nil {
			c.Close()
			return nil, err
		}
	}
	return sc, nil
}

// sentinelHandshakeError points a failed handshake at the Sentinel settings.
func sentinelHandshakeError(err error) error {
	return fmt.Errorf("%s", strings.NewReplacer("backend_tls_ca_file", "sentinel_tls_ca_file", "backend_tls_server_name", "sentinel_tls_server_name",
		"backend_tls is on", "sentinel_tls is on").Replace(err.Error()))
}

// do sends one command and reads its reply by deadline.
func (c *sentinelConn) do(deadline time.Time, args ...string) (resp.Value, error) {
	vs, err := c.pipeline(deadline, args)
	if err != nil {
		return resp.Value{}, err
	}
	return vs[0], nil
}

// pipeline sends commands in one write and reads their replies by
// deadline: a Sentinel runs them one after the other, with nothing of
// its own in between.
func (c *sentinelConn) pipeline(deadline time.Time, cmds ...[]string) ([]resp.Value, error) {
	c.SetDeadline(deadline)
	var b []byte
	for _, args := range cmds {
		b = resp.AppendCommand(b, args...)
	}
	if _, err := c.Write(b); err != nil {
		return nil, err
	}
	out := make([]resp.Value, len(cmds))
	for i := range out {
		v, err := c.rd.Read()
		if err != nil {
			return nil, err
		}
		out[i] = v.Clone()
	}
	return out, nil
}

// answer is one Sentinel's part in a round: the master it names and the
// group's config epoch it knows, or why it names none.
type answer struct {
	addr  string
	epoch int64
	err   string
}

// configEpoch reads config-epoch from SENTINEL MASTER's field list.
func configEpoch(v resp.Value) (int64, bool) {
	if v.Kind != resp.KindArray {
		return 0, false
	}
	for i := 0; i+1 < len(v.Elems); i += 2 {
		if string(v.Elems[i].Str) == "config-epoch" {
			n, err := strconv.ParseInt(string(v.Elems[i+1].Str), 10, 64)
			return n, err == nil && n >= 0
		}
	}
	return 0, false
}

// askOne asks Sentinel i which master it names.
func (f *follower) askOne(ctx context.Context, i int, deadline time.Time) answer {
	c := f.q[i]
	if c == nil {
		var err error
		if c, err = f.dialSentinel(ctx, f.opt.Addrs[i]); err != nil {
			return answer{err: err.Error()}
		}
		f.q[i] = c
	}
	// The address as get-master-addr-by-name gives it (the promoted replica
	// as soon as the failover has promoted it) and the config epoch beside
	// it, read back to back.
	vs, err := c.pipeline(deadline, []string{"SENTINEL", "get-master-addr-by-name", f.opt.Name}, []string{"SENTINEL", "MASTER", f.opt.Name})
	var v resp.Value
	if err == nil {
		v = vs[0]
	}
	switch {
	case err != nil:
		c.Close()
		f.q[i] = nil
		return answer{err: "no answer: " + err.Error()}
	case v.Kind == resp.KindError && (bytes.HasPrefix(v.Str, []byte("NOAUTH")) || bytes.HasPrefix(v.Str, []byte("WRONGPASS"))):
		return answer{err: string(v.Str) + " (set sentinel_password, and sentinel_username for an ACL user)"}
	case v.Kind == resp.KindError:
		return answer{err: string(v.Str)}
	case v.Kind == resp.KindNil || (v.Kind == resp.KindArray && len(v.Elems) == 0):
		return answer{err: "it does not know the master " + f.opt.Name}
	case v.Kind != resp.KindArray || len(v.Elems) != 2:
		return answer{err: "unexpected answer " + v.String()}
	}
	epoch, ok := configEpoch(vs[1])
	if !ok {
		return answer{err: "no config-epoch in SENTINEL MASTER: " + vs[1].String()}
	}
	return answer{addr: net.JoinHostPort(string(v.Elems[0].Str), string(v.Elems[1].Str)), epoch: epoch}
}

// round is what one round of questions found.
type round struct {
	at        time.Time // when it started
	master    string    // named by a majority of the configured Sentinels; "" when none is
	epoch     int64     // the config epoch that majority named with it
	agree     int
	reachable int
	answers   []answer
}

// ask runs a round of questions to every Sentinel at once and applies what
// it found to the link. Rounds do not overlap.
func (l *Link) ask() round {
	f := l.follower
	f.askMu.Lock()
	defer f.askMu.Unlock()
	r := round{at: time.Now(), answers: make([]answer, len(f.opt.Addrs))}
	deadline := r.at.Add(f.opt.Timeout)
	var wg sync.WaitGroup
	for i := range f.opt.Addrs {
		wg.Add(1)
		go func() { // owned by this round, which waits for it
			defer wg.Done()
			r.answers[i] = f.askOne(l.ctx, i, deadline)
		}()
	}
	wg.Wait()
	// A majority must name the same master under the same epoch: a
	// Sentinel that lags behind a failback names the right address under
	// an older epoch, and the epoch is what tells the switch.
	type named struct {
		addr  string
		epoch int64
	}
	votes := map[named]int{}
	for _, a := range r.answers {
		if a.err == "" {
			r.reachable++
			votes[named{a.addr, a.epoch}]++
		}
	}
	for n, k := range votes {
		if k > len(f.opt.Addrs)/2 {
			r.master, r.epoch, r.agree = n.addr, n.epoch, k
		}
	}
	l.applyRound(r)
	return r
}

// describe lists what each Sentinel said, for the log and INFO.
func (f *follower) describe(as []answer) string {
	var parts []string
	for i, a := range as {
		if a.err != "" {
			parts = append(parts, f.opt.Addrs[i]+": "+a.err)
		} else {
			parts = append(parts, f.opt.Addrs[i]+" names "+a.addr+" (epoch "+strconv.FormatInt(a.epoch, 10)+")")
		}
	}
	return strings.Join(parts, "; ")
}

// applyRound records a round: a majority's master is confirmed from the
// round's start; a new one, or a new epoch, is a switch, which ends the
// connection to the old master at once (its votes already stopped
// counting: the confirmation is for another address or epoch).
func (l *Link) applyRound(r round) {
	f := l.follower
	var drop []net.Conn
	noMajority := ""
	switched := ""
	wake := false
	l.mu.Lock()
	f.agree, f.reachable = r.agree, r.reachable
	if r.master == "" {
		f.answers = f.describe(r.answers)
		if f.answers != f.lastNoMaj {
			f.lastNoMaj = f.answers
			noMajority = f.answers
		}
	} else {
		f.answers, f.lastNoMaj = "", ""
		if f.master != "" && (r.master != f.master || r.epoch != f.epoch) {
			f.switches++
			f.from, f.switchAt = f.master, time.Now()
			if f.pending == "" {
				f.pending = f.master
			}
			switched = f.master
		}
		f.master, f.epoch = r.master, r.epoch
		if r.at.After(f.confirmedAt) {
			f.confirmedAt = r.at
		}
		if l.conn != nil && (f.connAddr != r.master || f.connEpoch != r.epoch) {
			drop = append(drop, l.conn)
		}
		if l.conn == nil || switched != "" {
			wake = true
		}
		if l.track.conn != nil && l.track.addr != r.master {
			drop = append(drop, l.track.conn)
		}
	}
	l.mu.Unlock()
	if noMajority != "" {
		l.log.Warn(fmt.Sprintf("backend %s: no majority of its %d Sentinels names a master; its votes stop counting within %v", f.opt.Name, len(f.opt.Addrs), f.opt.Lease),
			"sentinels", noMajority)
	}
	if switched != "" {
		l.log.Debug("Sentinels switched master", "from", switched, "to", r.master)
	}
	if wake {
		l.wakeRun()
	}
	for _, c := range drop {
		c.Close()
	}
}

// confirmedLocked reports whether the Sentinels' answer lets the current
// connection's master count at now (always, for a plain backend).
func (l *Link) confirmedLocked(now time.Time) bool {
	f := l.follower
	return f == nil || (f.master != "" && f.connAddr == f.master && f.connEpoch == f.epoch && now.Before(f.confirmedAt.Add(f.opt.Lease)))
}

// target is the address to dial: the backend's own, or the master a
// majority of the Sentinels named in a round started less than Lease ago
// (a fresh round first, when fresh is set).
func (l *Link) target(fresh bool) (string, error) {
	f := l.follower
	if f == nil {
		return l.opt.Addr, nil
	}
	var r round
	if fresh {
		r = l.ask()
	}
	l.mu.Lock()
	addr, at := f.master, f.confirmedAt
	l.mu.Unlock()
	if addr != "" && time.Since(at) < f.opt.Lease {
		return addr, nil
	}
	if r.answers == nil {
		return "", fmt.Errorf("no majority of the Sentinels has named a master lately")
	}
	return "", fmt.Errorf("no majority of the %d Sentinels names a master: %s", len(f.opt.Addrs), f.describe(r.answers))
}

// wakeRun cuts the run loop's backoff short: there is a new master to dial.
func (l *Link) wakeRun() {
	select {
	case l.redial <- struct{}{}:
	default:
	}
}

// follow asks the Sentinels every Interval, and at once when poked.
func (l *Link) follow() {
	defer l.wg.Done()
	f := l.follower
	t := time.NewTicker(f.opt.Interval)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		case <-f.wake:
		}
		l.ask()
	}
}

// subscribe keeps a subscription to +switch-master on Sentinel i, and
// pokes a round when it connects (what was announced meanwhile is
// unknown) and when a switch of this master is announced.
func (l *Link) subscribe(i int) {
	defer l.wg.Done()
	f := l.follower
	backoff := 10 * time.Millisecond
	for l.ctx.Err() == nil {
		start := time.Now()
		err := l.serveSubscription(i)
		if l.ctx.Err() != nil {
			return
		}
		if time.Since(start) > 5*time.Second {
			backoff = 10 * time.Millisecond
		}
		l.log.Debug("Sentinel subscription lost", "sentinel", f.opt.Addrs[i], "err", err)
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (l *Link) serveSubscription(i int) error {
	f := l.follower
	c, err := f.dialSentinel(l.ctx, f.opt.Addrs[i])
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.ctx.Err() != nil {
		l.mu.Unlock()
		c.Close()
		return l.ctx.Err()
	}
	f.subs[i] = c
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		f.subs[i] = nil
		l.mu.Unlock()
		c.Close()
	}()
	v, err := c.do(time.Now().Add(f.opt.Timeout), "SUBSCRIBE", "+switch-master")
	if err != nil {
		return err
	}
	if v.Kind == resp.KindError {
		return fmt.Errorf("SUBSCRIBE +switch-master: %s", v.Str)
	}
	c.SetDeadline(time.Time{})
	f.poke()
	prefix := []byte(f.opt.Name + " ")
	for {
		v, err := c.rd.Read()
		if err != nil {
			return err
		}
		// ["message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"]
		if v.Kind == resp.KindArray && len(v.Elems) == 3 && bytes.HasPrefix(v.Elems[2].Str, prefix) {
			f.poke()
		}
	}
}

// closeSubscriptions ends the subscriptions, so that their readers return.
func (l *Link) closeSubscriptions() {
	l.mu.Lock()
	for _, c := range l.follower.subs {
		if c != nil {
			c.Close()
		}
	}
	l.mu.Unlock()
}

// closeQueries closes the query connections, once no round runs.
func (l *Link) closeQueries() {
	f := l.follower
	f.askMu.Lock()
	defer f.askMu.Unlock()
	for i, c := range f.q {
		if c != nil {
			c.Close()
			f.q[i] = nil
		}
	}
}

// sentinelHealthLocked is the Sentinel part of Health.
func (l *Link) sentinelHealthLocked(now time.Time) *SentinelHealth {
	f := l.follower
	h := &SentinelHealth{Name: f.opt.Name, Master: f.master, Agree: f.agree, Reachable: f.reachable, Sentinels: len(f.opt.Addrs),
		Answers: f.answers, Switches: f.switches, From: f.from, SwitchAt: f.switchAt}
	if l.confirmedLocked(now) {
		h.Confirmed = f.confirmedAt.Add(f.opt.Lease)
	}
	return h
}

// switchedLocked takes the switch not yet logged, for a line about addr:
// the master before it. The switch stays pending when addr is no longer
// the master a majority names: a dial to an address a newer round has
// replaced says nothing of the switch to the new one, whose connection
// logs it.
func (l *Link) switchedLocked(addr string) string {
	f := l.follower
	if f == nil || addr != f.master {
		return ""
	}
	from := f.pending
	f.pending = ""
	return from
}

// switchLine is the log line of a switch. A new config epoch that names
// the same master (a failover under way, before the Sentinels name the
// promoted replica) is a switch too, worded as what it is.
func (l *Link) switchLine(from, to string) string {
	if from == to {
		return fmt.Sprintf("backend %s: Sentinels moved master %s to a new config epoch (a failover under way?)", l.follower.opt.Name, to)
	}
	return fmt.Sprintf("backend %s: Sentinel switched master %s -> %s", l.follower.opt.Name, from, to)
}

// countsIn words how long until a master counts: "it counts in 61 s".
func countsIn(d time.Duration) string {
	if d <= 0 {
		return "it counts now"
	}
	return fmt.Sprintf("it counts in %d s", int64(math.Ceil(d.Seconds())))
}
