package safety

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// A standby comes to answer at a master's address: a redis-server that has
// run for longer than the hold and holds a copy of the master's marker
// taken before a lock was granted (a backup restored into it, a warm
// standby), while every proxy that knew the master's run is replaced by a
// fresh one. The copy's marker names another run than the standby's, so
// the marker dates its loss at the standby's start, long past.

// driveStandbyFresh returns a Drive for 3 masters: spares for a majority
// start and run for longer than the hold; the masters' markers are copied
// to them (DUMP, RESTORE), once the master that keeps its data was told
// of counts newer than the copies'; client A locks; every proxy stops; the
// relays of that majority move to the spares; fresh proxies start; client
// C tries A's key while A's validity lasts and must be refused.
func driveStandbyFresh(key string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		n, k := e.C.NumBackends(), e.C.Majority()
		ttl := e.C.Config.MaxTTL
		a, c, closeClients := e.holderAndRival(5800, 41)
		defer closeClients()
		ms := e.pick(k)
		keep := others(n, ms)
		spares := map[int]*redisproc.Server{}
		for _, i := range ms {
			s, err := e.C.startSpare()
			if err != nil {
				return err
			}
			defer s.Stop()
			spares[i] = s
		}
		sleepCtx(ctx, e.C.Hold()+uptimeRounding)
		if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
			return errors.New("the masters never all counted")
		}
		for _, i := range ms {
			if _, err := copyKey(ctx, e.C.Server(i).Addr, spares[i].Addr, netio.MarkerKey); err != nil {
				return err
			}
		}
		e.Logf("the markers of masters %v copied to spare redis-servers up for %v", ms, e.C.Hold()+uptimeRounding)
		told := waitToldNewerThan(ctx, e, func(i int) map[string]string { return readMarker(ctx, direct(spares[i].Addr)) }, ms, keep, 5*time.Second)
		e.Logf("masters %v told of counts newer than the copies: %v", keep, told)
		la, ok := acquireWithin(ctx, a, key, ttl, time.Second)
		if !ok {
			return errors.New("client A could not lock")
		}
		va, _ := a.Read(la)
		e.Logf("client A (proxy 0) holds %s as %s until %s", key, la.Token, e.H.rel(la.ValidUntil))
		stopped := e.StopProxiesBut(-1)
		for _, i := range ms {
			e.C.Relays[i].Retarget(spares[i].Addr)
		}
		moved := time.Now()
		e.Logf("the relays of masters %v moved to the spares holding the copies", ms)
		e.NoMajority(moved, moved.Add(e.C.Hold()), fmt.Sprintf("masters %v replaced by standbys holding older copies: out for max_ttl + drift", ms))
		e.StartProxies(stopped)
		inside := tryInside(ctx, e, c, key, la, 1)
		holderFinishes(ctx, e, a, la, va, inside)
		e.noteHolds(1, ms, moved)
		for _, i := range ms {
			e.C.Relays[i].Retarget(e.C.Server(i).Addr)
		}
		return nil
	}
}

// waitToldNewerThan is waitToldNewer with the copies read by copyOf.
func waitToldNewerThan(ctx context.Context, e *Env, copyOf func(i int) map[string]string, ms, keep []int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		all := true
		for _, i := range ms {
			cp := copyOf(i)
			seen := false
			for _, j := range keep {
				seen = seen || toldNewer(cp, readMarker(ctx, direct(e.C.Server(j).Addr)))
			}
			all = all && seen
		}
		if all {
			return true
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return false
}

// driveUpgradeStandbyFresh returns a Drive for the old Redis: a spare
// runs for longer than the hold and gets a copy of the old Redis's marker;
// an old client O locks on the old Redis directly; every proxy stops; the
// proxies' relay to the old Redis moves to the spare; fresh proxies start;
// client C tries O's key while O's validity lasts and must be refused.
func driveUpgradeStandbyFresh(key string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		ttl := e.C.Config.MaxTTL
		c := NewClient(5801, e.C.NumProxies()-1, e.C, e.H, 42)
		defer c.Close()
		spare, err := e.C.startSpare()
		if err != nil {
			return err
		}
		defer spare.Stop()
		sleepCtx(ctx, e.C.Hold()+uptimeRounding)
		if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) || !e.C.waitVetoCounting(ctx, 2*e.C.Hold()+5*time.Second) {
			return errors.New("the masters and the old Redis never all counted")
		}
		if _, err := copyKey(ctx, e.C.Old.Addr, spare.Addr, netio.MarkerKey); err != nil {
			return err
		}
		o := NewOldClient(oldClientIDs+200, e.C, e.H, 43)
		defer o.Close()
		lo, ok := acquireWithin(ctx, o, key, ttl, time.Second)
		if !ok {
			return errors.New("old client O could not lock")
		}
		vo, _ := o.Read(lo)
		e.Logf("old client O holds %s on the old Redis directly as %s until %s", key, lo.Token, e.H.rel(lo.ValidUntil))
		stopped := e.StopProxiesBut(-1)
		e.C.OldRelay.Retarget(spare.Addr)
		moved := time.Now()
		e.Logf("the proxies' relay to the old Redis moved to a spare up for %v holding a copy of its marker from before O's lock", e.C.Hold()+uptimeRounding)
		e.vetoOut(moved, moved.Add(e.C.Hold()), "replaced by a standby holding an older copy")
		e.StartProxies(stopped)
		inside := tryInside(ctx, e, c, key, lo, 1)
		holderFinishes(ctx, e, o, lo, vo, inside)
		e.noteVetoHolds(1, moved)
		e.C.OldRelay.Retarget(e.C.Old.Addr)
		return nil
	}
}
