package netio

import (
	"bytes"
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Watching a Redis's direct clients: during an upgrade, the Redis the
// clients used before the proxy (the veto) is watched for connections
// other than the proxies'. Once it has had none for the hold (max_ttl +
// drift), every lock an old client took there has expired, and the veto
// can go. A connection that came and went between two looks still shows,
// in the backend's count of connections received.

// directPrefix names the proxies' own connections (CLIENT SETNAME).
const directPrefix = "redlock-proxy"

// directState is what the watch saw. The link's mu protects it.
type directState struct {
	looked   bool      // CLIENT LIST answered at least once
	maxID    int64     // the largest connection id seen
	received int64     // connections the backend had received at the last look
	clients  int       // direct clients at the last look
	since    time.Time // since when none was seen (zero while there are some)
	last     time.Time // when a direct client was last seen (zero: never, since the proxy started)
	otherDB  int       // direct clients at the last look in another database than the link's
}

var (
	clientListCmd = resp.AppendCommand(nil, "CLIENT", "LIST", "TYPE", "normal")
	infoStatsCmd  = resp.AppendCommand(nil, "INFO", "stats")
)

// watchClients asks for the backend's client list and its count of
// connections received (INFO stats), one after the other.
func (l *Link) watchClients() {
	look := &directLook{l: l}
	deadline := time.Now().Add(l.opt.DialTimeout)
	l.Send(clientListCmd, nil, look, 0, deadline)
	l.Send(infoStatsCmd, nil, look, 1, deadline)
}

// directLook gathers one look's two replies.
type directLook struct {
	l    *Link
	list []byte
	ok   bool
}

func (d *directLook) Receive(tag int, res Result) {
	if res.Err != nil || res.V.Kind != resp.KindBulk {
		d.ok = false
		return
	}
	if tag == 0 {
		d.list, d.ok = res.V.Str, true
		return
	}
	if !d.ok {
		return
	}
	var received int64 = -1
	for _, line := range bytes.Split(res.V.Str, []byte("\n")) {
		if v, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("total_connections_received:")); ok {
			received, _ = strconv.ParseInt(string(v), 10, 64)
		}
	}
	d.l.lookedAtClients(d.list, received, time.Now())
}

// lookedAtClients applies a CLIENT LIST reply and the connections received
// so far, seen at now.
func (l *Link) lookedAtClients(list []byte, received int64, now time.Time) {
	direct, otherDB := 0, 0
	var maxID int64
	newIDs := int64(0)
	l.mu.Lock()
	d := &l.direct
	for _, line := range bytes.Split(list, []byte("\n")) {
		var id int64
		var name []byte
		db := -1
		for _, f := range bytes.Fields(line) {
			if v, ok := bytes.CutPrefix(f, []byte("id=")); ok {
				id, _ = strconv.ParseInt(string(v), 10, 64)
			} else if v, ok := bytes.CutPrefix(f, []byte("name=")); ok {
				name = v
			} else if v, ok := bytes.CutPrefix(f, []byte("db=")); ok {
				db, _ = strconv.Atoi(string(v))
			}
		}
		if id == 0 {
			continue
		}
		maxID = max(maxID, id)
		if d.looked && id > d.maxID {
			newIDs++
		}
		if !bytes.HasPrefix(name, []byte(directPrefix)) {
			direct++
			if db >= 0 && db != l.opt.DB {
				otherDB++
			}
		}
	}
	// Connections received since the last look that are not in the list
	// came and went between the two: clients too (the proxies' own stay,
	// and name themselves at once). A count that went back (a restart, a
	// statistics reset) hides them: as if some came.
	gone := d.looked && (received < d.received || received-d.received > newIDs)
	if direct > 0 || gone || received < 0 {
		d.last, d.since = now, time.Time{}
	} else if d.since.IsZero() {
		d.since = now
	}
	d.looked, d.clients, d.received = true, direct, received
	d.maxID = max(d.maxID, maxID)
	warn := otherDB > 0 && d.otherDB == 0
	d.otherDB = otherDB
	l.mu.Unlock()
	if warn {
		// Their locks are keys of that database, which the veto does not
		// read: they and the proxy's clients do not exclude each other.
		l.log.Warn("direct clients use another database than the proxy reads on this Redis: locks they hold there are not seen, and do not keep the proxy's clients out; name their database (upgrade_from_db)",
			"clients", otherDB, "database", l.opt.DB)
	}
}
