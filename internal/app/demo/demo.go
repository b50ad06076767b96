// Package demo runs in-process Redis servers (miniredis) so that the proxy
// starts with no configuration at all. They are for trying the proxy, not
// for production: they share the proxy's process, so they fail together.
//
// It promises: keys expire in real time (miniredis alone only expires keys
// when told to, so a goroutine owned by Set advances its clock), and Close
// stops every server and that goroutine.
package demo

import (
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Set is a group of in-process backends.
type Set struct {
	servers []*miniredis.Miniredis
	stop    chan struct{}
	wg      sync.WaitGroup
}

// tick is how often key TTLs are advanced: the granularity of expiry.
const tick = 5 * time.Millisecond

// Start runs n servers on free loopback ports.
func Start(n int) (*Set, error) {
	s := &Set{stop: make(chan struct{})}
	for i := 0; i < n; i++ {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			s.Close()
			return nil, fmt.Errorf("demo: start backend %d: %w", i, err)
		}
		s.servers = append(s.servers, m)
	}
	s.wg.Add(1)
	go s.clock()
	return s, nil
}

// clock advances the servers' TTLs with the monotonic clock.
func (s *Set) clock() {
	defer s.wg.Done()
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			d := now.Sub(last)
			last = now
			for _, m := range s.servers {
				m.FastForward(d)
			}
		}
	}
}

// Addrs are the servers' addresses.
func (s *Set) Addrs() []string {
	var a []string
	for _, m := range s.servers {
		a = append(a, m.Addr())
	}
	return a
}

// Close stops every server.
func (s *Set) Close() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	s.wg.Wait()
	for _, m := range s.servers {
		m.Close()
	}
}
