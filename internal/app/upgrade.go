package app

import (
	"fmt"
	"time"

	"github.com/redlock-proxy/redlock-proxy/netio"
)

// The upgrade from one Redis (upgrade_from). The Redis the clients used
// before the proxy is the pool's veto: every grant needs its grant too. The
// operator needs to know when the setting can go: once that Redis has had
// no client but the proxies for the hold (max_ttl + drift), every lock an
// old client took there directly has expired. The log says it once, and
// again if a direct client comes back; INFO proxy and /readyz say it
// always.

// upgradeStatus is what the veto's health says about the upgrade at now.
type upgradeStatus struct {
	addr     string
	up       bool
	known    bool          // its clients have been looked at
	direct   int           // clients that are not the proxies', at the last look
	quietFor time.Duration // how long there has been none (0 while some are seen)
	canDrop  bool          // quiet for the hold
}

func statusOf(h netio.Health, hold time.Duration, now time.Time) upgradeStatus {
	s := upgradeStatus{addr: h.Addr, up: h.Up, known: h.DirectClientsKnown, direct: h.DirectClients}
	if s.known && !h.NoDirectSince.IsZero() {
		s.quietFor = now.Sub(h.NoDirectSince)
		s.canDrop = s.quietFor >= hold
	}
	return s
}

// line words the status for /readyz.
func (s upgradeStatus) line(hold time.Duration) string {
	switch {
	case !s.up:
		return fmt.Sprintf("upgrade_from %s: down: every lock is refused while it does not answer (clients locking on it directly may hold them)", s.addr)
	case !s.known:
		return fmt.Sprintf("upgrade_from %s: its clients not looked at yet", s.addr)
	case s.canDrop:
		return fmt.Sprintf("upgrade_from %s: no client but the proxies for %v (more than max_ttl + drift, %v): every lock taken on it directly has expired; upgrade_from can be dropped", s.addr, s.quietFor.Round(time.Second), hold.Round(time.Second))
	case s.direct > 0:
		return fmt.Sprintf("upgrade_from %s: %d direct clients (not through a proxy): keep upgrade_from", s.addr, s.direct)
	}
	return fmt.Sprintf("upgrade_from %s: no direct client for %v; it can be dropped after %v", s.addr, s.quietFor.Round(time.Second), hold.Round(time.Second))
}

// upgradeWatch logs the upgrade's signal as it changes.
type upgradeWatch struct {
	a       *App
	hold    time.Duration
	canDrop bool
}

func (w *upgradeWatch) step(now time.Time) {
	h, ok := w.a.pool.VetoHealth()
	if !ok {
		return
	}
	s := statusOf(h, w.hold, now)
	switch {
	case s.canDrop && !w.canDrop:
		w.a.log.Info("upgrade_from: "+s.line(w.hold), "upgrade_from", s.addr)
	case !s.canDrop && w.canDrop:
		w.a.log.Warn(fmt.Sprintf("upgrade_from %s: a direct client again (%d now): keep upgrade_from", s.addr, s.direct), "upgrade_from", s.addr)
	}
	w.canDrop = s.canDrop
}
