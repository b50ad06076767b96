package quorum

// Reason names what a backend's quarantine is for: the kind of loss of
// writes (or start) it counts from. The marker script records the word
// with each loss, so every proxy reports the same one; the Watch and the
// link add the losses they see themselves. Explain says what each means to
// an operator; that table is the one description of the words.
type Reason string

// The reasons. The marker script (netio/marker.lua) writes the same words.
const (
	ReasonNone       Reason = ""           // no quarantine in force
	ReasonStarted    Reason = "started"    // the run started less than the hold ago
	ReasonNew        Reason = "new"        // no marker: fresh, flushed, restarted empty, or never used by a proxy
	ReasonRestarted  Reason = "restarted"  // a new run, with whatever file it reloaded
	ReasonPromoted   Reason = "promoted"   // a replica of the master the marker was written on, promoted
	ReasonResynced   Reason = "resynced"   // a replication history the marker does not know (a failback)
	ReasonEvicting   Reason = "evicting"   // a memory policy that may evict keys is or was in force
	ReasonEvicted    Reason = "evicted"    // keys were evicted, or the eviction count was reset
	ReasonReset      Reason = "reset"      // the statistics were reset (CONFIG RESETSTAT), which hides evictions
	ReasonReplaced   Reason = "replaced"   // another server answers at the address
	ReasonForeign    Reason = "foreign"    // Redis Cluster: the marker was written on another node
	ReasonMoved      Reason = "moved"      // Redis Cluster: the marker's slot left the node, or the marker moved
	ReasonClock      Reason = "clock"      // its wall clock jumped ahead, which expires keys early
	ReasonRolledBack Reason = "rolledback" // an older copy of its data than a proxy saw
	ReasonTakeover   Reason = "takeover"   // Redis Cluster: confirmed as the new owner of another master's slots
	ReasonSwitched   Reason = "switched"   // Sentinel: the group's master switched to it
	ReasonMarked     Reason = "marked"     // a loss another check recorded, with no word
	ReasonUnmarked   Reason = "unmarked"   // no marker check could run: a loss is assumed now
	// ReasonVouched is no loss: it is the word of the record VOUCH writes
	// (an operator vouched for the master as brand new), kept until a loss
	// is recorded on top of it.
	ReasonVouched Reason = "vouched"
)

// explanations say, for an operator, why a backend with each reason's
// quarantine may lack locks.
var explanations = map[Reason]string{
	ReasonStarted:    "it started less than max_ttl + drift ago and may have forgotten locks",
	ReasonNew:        "it has no replication marker (a fresh or flushed master, or one no proxy has used): it may have forgotten locks",
	ReasonPromoted:   "it is a promoted replica and may lack the last locks of its old master",
	ReasonRestarted:  "it restarted and may have forgotten locks (a reloaded file cannot show it holds the last writes of the run before)",
	ReasonResynced:   "its replication history changed (a full resync from another master, then a promotion, as in a failback): it may lack locks it granted",
	ReasonEvicting:   "a memory policy that may evict keys was in force on it: it may have forgotten locks",
	ReasonEvicted:    "it evicted keys (or its eviction count was reset): it may have forgotten locks",
	ReasonReset:      "its statistics were reset (CONFIG RESETSTAT), which hides evictions: it may have forgotten locks",
	ReasonReplaced:   "another server than the one this proxy knew answers at its address: it may lack the locks granted there",
	ReasonForeign:    "its replication marker was written on another node (the marker's slot moved here, or a replica took over): it may lack locks granted there",
	ReasonClock:      "its clock jumped ahead, which expires keys early: it may have lost locks before their time",
	ReasonRolledBack: "it serves an older copy of its data than a proxy saw (a database swapped in, a backup restored, a copy brought back): it may lack locks granted since",
	ReasonTakeover:   "a majority of the cluster's other masters named it the new owner of another master's slots (a failover): it may lack the locks granted on the old master, which may have counted until then",
	ReasonSwitched:   "its Sentinels switched the group's master to it (a failover, or a failback to a master never demoted): it may lack the locks granted on the master before",
	ReasonMoved:      "the slot of its replication marker left it (a resharding), or the marker moved to another slot: what its data went through meanwhile cannot be told",
	ReasonMarked:     "it may have lost writes less than max_ttl + drift ago",
	ReasonUnmarked:   "it may have lost writes less than max_ttl + drift ago",
	ReasonVouched:    "an operator vouched for it as brand new (VOUCH) through a proxy whose max_ttl + drift is shorter than this one's: it waits the rest of this one's",
}

// Explain says why a backend quarantined for r may lack locks, for an
// operator; an unknown word (a newer proxy's, read from a marker) is
// returned as it is.
func (r Reason) Explain() string {
	if s, ok := explanations[r]; ok {
		return s
	}
	return string(r)
}

// Known reports whether r is one of the reasons above (ReasonNone is not).
func (r Reason) Known() bool {
	_, ok := explanations[r]
	return ok
}
