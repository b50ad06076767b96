package proxy

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/buildinfo"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// redisVersion is the Redis version the proxy presents: the command set and
// replies of Redis 7.0, which its backends run.
const redisVersion = "7.0.15"

// infoSections lists INFO's sections in order, and whether plain INFO
// ("default") includes each.
var infoSections = []struct {
	name    string
	deflt   bool
	content func(s *Server) string
}{
	{"server", true, (*Server).infoServer},
	{"clients", true, (*Server).infoClients},
	{"memory", true, (*Server).infoMemory},
	{"persistence", true, func(*Server) string { return "loading:0\r\nasync_loading:0\r\n" }},
	{"stats", true, (*Server).infoStats},
	{"replication", true, func(*Server) string { return "role:master\r\nconnected_slaves:0\r\n" }},
	{"proxy", true, (*Server).infoProxy},
	{"keyspace", true, (*Server).keyspaceInfo},
}

func handleInfo(c *client, args [][]byte) {
	want := map[string]bool{}
	all := false
	for _, a := range args[1:] {
		s := strings.ToLower(string(a))
		switch s {
		case "all", "everything":
			all = true
		case "default":
			for _, sec := range infoSections {
				if sec.deflt {
					want[sec.name] = true
				}
			}
		default:
			want[s] = true
		}
	}
	if len(args) == 1 {
		all = true
	}
	var parts []string
	for _, sec := range infoSections {
		if !all && !want[sec.name] {
			continue
		}
		title := strings.ToUpper(sec.name[:1]) + sec.name[1:]
		parts = append(parts, "# "+title+"\r\n"+sec.content(c.s))
	}
	c.reply(resp.BulkValue([]byte(strings.Join(parts, "\r\n"))))
}

func (s *Server) infoServer() string {
	up := time.Since(s.started)
	port := ""
	if i := strings.LastIndexByte(s.cfg.Addr, ':'); i >= 0 {
		port = s.cfg.Addr[i+1:]
	}
	return fmt.Sprintf("redis_version:%s\r\nredis_mode:standalone\r\nredlock_proxy_version:%s\r\nredlock_proxy_revision:%s\r\n"+
		"os:%s %s\r\narch_bits:64\r\ngo_version:%s\r\nprocess_id:%d\r\nrun_id:%s\r\ntcp_port:%s\r\n"+
		"uptime_in_seconds:%d\r\nuptime_in_days:%d\r\n",
		redisVersion, s.cfg.Version, buildinfo.Read().Revision, runtime.GOOS, runtime.GOARCH, runtime.Version(), os.Getpid(), s.runID, port,
		int64(up.Seconds()), int64(up.Hours()/24))
}

func (s *Server) infoClients() string {
	// BLPOP (signals.go) is the one command that blocks a client here.
	return fmt.Sprintf("connected_clients:%d\r\nmaxclients:%d\r\nblocked_clients:%d\r\n", s.stats.clients.Load(), s.cfg.MaxClients, s.signals.blockedClients())
}

// infoMemory is the proxy process's own memory (the locks live on the
// backends): the Go heap in use, and what the Go runtime took from the
// system. The proxy has no maxmemory (CONFIG GET maxmemory says 0).
func (s *Server) infoMemory() string {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return fmt.Sprintf("used_memory:%d\r\nused_memory_human:%s\r\nused_memory_runtime:%d\r\nused_memory_runtime_human:%s\r\n"+
		"maxmemory:0\r\nmaxmemory_human:0B\r\nmaxmemory_policy:noeviction\r\nmem_allocator:go\r\n",
		m.HeapAlloc, bytesHuman(m.HeapAlloc), m.Sys, bytesHuman(m.Sys))
}

// bytesHuman writes a size as Redis's INFO does (1.50M).
func bytesHuman(n uint64) string {
	f := float64(n)
	for _, u := range []string{"B", "K", "M", "G", "T"} {
		if f < 1024 || u == "T" {
			if u == "B" {
				return fmt.Sprintf("%dB", n)
			}
			return fmt.Sprintf("%.2f%s", f, u)
		}
		f /= 1024
	}
	return ""
}

func (s *Server) infoStats() string {
	st := &s.stats
	return fmt.Sprintf("total_connections_received:%d\r\ntotal_commands_processed:%d\r\n"+
		"lock_granted:%d\r\nlock_refused:%d\r\nlock_extended:%d\r\nlock_extend_refused:%d\r\nlock_released:%d\r\nlock_release_refused:%d\r\n"+
		"lock_no_quorum:%d\r\nlock_revoked_late:%d\r\nundo_sent:%d\r\nundo_failed:%d\r\nundo_expired:%d\r\nrejected_commands:%d\r\nforced_unlocks:%d\r\n",
		st.connsTotal.Load(), st.commands.Load(), st.granted.Load(), st.refused.Load(), st.extended.Load(), st.extendRefused.Load(),
		st.released.Load(), st.releaseRefused.Load(), st.noQuorum.Load(),
		st.late.Load(), st.undos.Load(), st.undoFailed.Load(), st.undoExpired.Load(), st.rejected.Load(), st.forced.Load())
}

func (s *Server) infoProxy() string {
	var b strings.Builder
	n := s.be.N()
	now := time.Now()
	st := s.be.Health()
	var in [netio.StateCounting + 1]int
	undos := 0
	var longest time.Duration
	for _, h := range st {
		state, _ := h.State(now)
		in[state]++
		if state == netio.StateQuarantined {
			longest = max(longest, h.QuarantinedUntil.Sub(now))
		}
		undos += h.UndoRetained
	}
	fmt.Fprintf(&b, "backends:%d\r\nmajority:%d\r\nbackends_counting:%d\r\nbackends_quarantined:%d\r\nbackends_down:%d\r\nquarantine_left_ms:%d\r\nundo_waiting:%d\r\n",
		n, quorum.Majority(n), in[netio.StateCounting], in[netio.StateQuarantined], in[netio.StateDown], longest.Milliseconds(), undos)
	// The rarer states, only while some backend is in them.
	for _, s := range []netio.State{netio.StateUnconfirmed, netio.StateUnsure} {
		if in[s] > 0 {
			fmt.Fprintf(&b, "backends_%s:%d\r\n", s, in[s])
		}
	}
	fmt.Fprintf(&b, "drift_factor:%g\r\ndrift_floor_ms:%d\r\nbackend_timeout_ms:%d\r\nmax_ttl_ms:%d\r\n",
		s.cfg.Timing.DriftFactor, s.cfg.Timing.DriftFloor.Milliseconds(), s.cfg.BackendTimeout.Milliseconds(), s.cfg.MaxTTL.Milliseconds())
	for i, h := range st {
		state, _ := h.State(now)
		q := int64(0)
		if now.Before(h.QuarantinedUntil) {
			q = h.QuarantinedUntil.Sub(now).Milliseconds()
		}
		batch := 0.0
		if h.Writes > 0 {
			batch = float64(h.Sent) / float64(h.Writes)
		}
		fmt.Fprintf(&b, "backend%d:addr=%s,state=%s,latency_us=%d,quarantine_left_ms=%d,run_id=%s,connects=%d,losses=%d,timeouts=%d,errors=%d,commands=%d,writes=%d,mean_batch=%.2f\r\n",
			i, h.Addr, state, h.Latency.Microseconds(), q, h.RunID, h.Connects, h.Restarts, h.Timeouts, h.Errors, h.Sent, h.Writes, batch)
		switch state {
		case netio.StateQuarantined:
			fmt.Fprintf(&b, "backend%d_quarantine_reason:%s\r\n", i, oneLine(h.QuarantineReason))
		case netio.StateDown:
			fmt.Fprintf(&b, "backend%d_last_error:%s\r\n", i, oneLine(h.LastError))
		}
		if sh := h.Sentinel; sh != nil {
			ago := int64(-1)
			if !sh.SwitchAt.IsZero() {
				ago = now.Sub(sh.SwitchAt).Milliseconds()
			}
			fmt.Fprintf(&b, "backend%d_sentinel:name=%s,master=%s,sentinels=%d,agree=%d,reachable=%d,switches=%d,last_switch_from=%s,last_switch_ago_ms=%d\r\n",
				i, sh.Name, sh.Master, sh.Sentinels, sh.Agree, sh.Reachable, sh.Switches, sh.From, ago)
			if sh.Answers != "" {
				fmt.Fprintf(&b, "backend%d_sentinel_answers:%s\r\n", i, oneLine(sh.Answers))
			}
		}
		infoShards(&b, i, h, now)
	}
	if h, ok := s.be.Veto(); ok {
		hold := s.cfg.MaxTTL + s.cfg.Timing.Drift(s.cfg.MaxTTL)
		quiet := time.Duration(0)
		if h.DirectClientsKnown && !h.NoDirectSince.IsZero() {
			quiet = now.Sub(h.NoDirectSince)
		}
		up, canDrop := 0, 0
		if h.Up {
			up = 1
		}
		if quiet >= hold {
			canDrop = 1
		}
		fmt.Fprintf(&b, "upgrade_from:%s\r\nupgrade_from_up:%d\r\nupgrade_from_direct_clients:%d\r\nupgrade_from_no_direct_client_ms:%d\r\nupgrade_from_can_drop:%d\r\n",
			h.Addr, up, h.DirectClients, quiet.Milliseconds(), canDrop)
	}
	return b.String()
}

// infoShards writes, for a Redis Cluster backend, a line per shard: its
// master, slots, state (up: its votes count for the keys in its slots),
// quarantine and marker slot, and why it does not count when it does not.
func infoShards(b *strings.Builder, i int, h netio.Health, now time.Time) {
	if h.Shards == nil {
		return
	}
	counting := 0
	for _, s := range h.Shards {
		if s.Counts(now) {
			counting++
		}
	}
	fmt.Fprintf(b, "backend%d_shards:%d\r\nbackend%d_shards_counting:%d\r\n", i, len(h.Shards), i, counting)
	for j, s := range h.Shards {
		state, _ := s.State(now)
		q := int64(0)
		if now.Before(s.QuarantinedUntil) {
			q = s.QuarantinedUntil.Sub(now).Milliseconds()
		}
		fmt.Fprintf(b, "backend%d_shard%d:addr=%s,id=%s,slots=%s,slot_count=%d,state=%s,quarantine_left_ms=%d,marker_slot=%d,run_id=%s,connects=%d,losses=%d\r\n",
			i, j, s.Addr, s.ID, s.Slots, s.SlotCount, state, q, s.MarkerSlot, s.RunID, s.Connects, s.Restarts)
		switch state {
		case netio.StateQuarantined:
			fmt.Fprintf(b, "backend%d_shard%d_quarantine_reason:%s\r\n", i, j, oneLine(s.QuarantineReason))
		case netio.StateDown:
			fmt.Fprintf(b, "backend%d_shard%d_last_error:%s\r\n", i, j, oneLine(s.LastError))
		}
	}
}

// oneLine keeps a free-form text on one INFO line.
func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}
