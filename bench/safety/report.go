package safety

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what one scenario's run showed.
type Report struct {
	Scenario   string
	About      string
	Quarantine string
	Control    bool      // violations are expected: the run proves the checkers can see
	Origin     time.Time // the run's time zero (wall clock), to match the proxies' logs
	Duration   time.Duration
	Seed       uint64

	Backends, Proxies, Clients, Keys   int
	Extenders, Pipeliners, FreeLockers int
	Replicas                           bool
	Groups                             bool // every backend a Sentinel-managed group
	// OldClients lock on the old Redis directly (an upgrade), which the
	// proxies know as upgrade_from when UpgradeFrom; DirectHolds are the
	// old Redis's grants to them (counted in Holds too).
	OldClients, DirectHolds int
	UpgradeFrom             bool

	Holds           int // acquires granted
	Refusals        int // acquires refused (nil)
	Unknowns        int // acquires with an error
	Extends         int // extends granted
	ExtendsRefused  int // extends answered 0
	ExtendUnknowns  int // extends with an error
	Releases        int // releases that deleted the token
	ReleasesNotHeld int // releases answered 0
	ReleaseUnknowns int // releases with an error
	Increments      int64
	UnknownErrors   []string // a few of the unknowns' errors

	GrantsPerSecond     []int // by the second the OK arrived in
	MinGrantsPerSecond  int   // over whole seconds
	EmptySeconds        int   // whole seconds without a grant (the harness process running)
	StarvedSeconds      int   // whole seconds without a grant during a stall of the whole process
	GrantsAfterRecovery int   // majority-down: grants after the majority came back

	WindowViolations  int   // the windows checker: holds whose window overlaps another holder's
	LostUpdates       int64 // the register checker: increments lost, over all keys
	LostUpdatesPaused int64 // the part on keys where a writer was paused past its validity
	NonLinearizable   int   // the linearizability checker: keys whose history is not linearizable
	Inconclusive      int   // the linearizability checker: keys whose search timed out
	NoMajorityGrants  int   // grants inside an interval without a majority
	LateGrants        int   // grants that arrived after their own validity ended
	LateGrantsStalled int   // the same, while the whole harness process stalled (not counted)
	GhostLocks        int   // tokens of acquires answered nil that a majority still held after the undo time
	// ReportedGhosts are ghost locks on keys a proxy stopped while masters
	// hung reported, at its shutdown, as undos left pending (expected where
	// the scenario says so; not counted in GhostLocks); ReportsUnfound the
	// keys it reported left on a majority that the ghost check did not find.
	ReportedGhosts int
	ReportsUnfound []string
	Snapshots      int // snapshots of the masters the ghost-lock check read
	FreeRefusals   int // acquires of keys nobody else uses that were not granted (liveness)

	// Fencing numbers (the fencing checker).
	Fenced             int   // FENCE answers that were a number
	FenceNil           int   // FENCE answers that were nil
	FenceErrors        int   // FENCE calls that failed
	FencedGrants       int   // grants with at least one number
	FenceViolations    int   // the fencing checker: grants whose numbers break FENCE's contract
	StaleWritesRefused int   // writes a fenced register refused
	FencedRefusals     int64 // reads and writes fenced registers refused

	Stalls   []string // stalls of the whole harness process (the machine starved it)
	Slowest  []string // the slowest operations, when slower than 500ms
	Relays   []string // each relay's counters
	Examples []string
	// Losses are the mixed-TTL nemesis's losses of masters, each hold
	// against the locks the master may have held and the ceiling.
	Losses     []string
	Faults     []string // the fault log
	Visualized []string // porcupine HTML files
	Problems   []string // expectations not met; empty when the run passed
}

// Violations is the total the checkers charge to the lock: everything they
// reported except lost updates explained by a writer paused past its
// validity (which no lock can prevent; see LostUpdatesPaused).
func (r *Report) Violations() int64 {
	return int64(r.WindowViolations) + r.LostUpdates - r.LostUpdatesPaused + int64(r.NonLinearizable) + int64(r.NoMajorityGrants) +
		int64(r.LateGrants) + int64(r.GhostLocks) + int64(r.FenceViolations)
}

// Passed reports whether the run met its scenario's expectations.
func (r *Report) Passed() bool { return len(r.Problems) == 0 }

// Verdict is one word for the table.
func (r *Report) Verdict() string {
	switch {
	case !r.Passed():
		return "FAIL"
	case r.Control:
		return "detected"
	}
	return "ok"
}

// WriteDetails writes the report's examples, problems and (optionally) its
// fault log.
func (r *Report) WriteDetails(w io.Writer, faults bool) {
	fmt.Fprintf(w, "%s (%s): %s\n", r.Scenario, r.About, r.Verdict())
	replicas := ""
	if r.Replicas {
		replicas = " (each with a replica)"
	}
	if r.Groups {
		replicas = " (each a Sentinel group: a master, a replica, 3 Sentinels)"
	}
	fmt.Fprintf(w, "  quarantine %s, %d masters%s, %d proxy slots, %d clients on %d keys, %v from %s, seed %d\n", r.Quarantine,
		r.Backends, replicas, r.Proxies, r.Clients, r.Keys, r.Duration.Round(time.Millisecond), r.Origin.Format("15:04:05.000"), r.Seed)
	if r.Extenders+r.Pipeliners+r.FreeLockers > 0 {
		fmt.Fprintf(w, "  and %d extending holders, %d pipelining clients, %d clients on keys nobody else uses\n", r.Extenders, r.Pipeliners, r.FreeLockers)
	}
	if r.OldClients > 0 {
		named := "named to the proxies as upgrade_from"
		if !r.UpgradeFrom {
			named = "not named to the proxies"
		}
		fmt.Fprintf(w, "  and %d clients locking on the old Redis directly (%s): %d of the holds were its grants to them\n", r.OldClients, named, r.DirectHolds)
	}
	fmt.Fprintf(w, "  holds %d, refusals %d, unknowns %d; extends %d ok, %d refused, %d unknown; releases %d ok, %d not held, %d unknown; increments %d\n",
		r.Holds, r.Refusals, r.Unknowns, r.Extends, r.ExtendsRefused, r.ExtendUnknowns, r.Releases, r.ReleasesNotHeld, r.ReleaseUnknowns, r.Increments)
	fmt.Fprintf(w, "  violations: windows %d, lost updates %d (%d by paused writers), non-linearizable keys %d, grants without majority %d, late grants %d (%d more in stalls), ghost locks %d (%d snapshots)\n",
		r.WindowViolations, r.LostUpdates, r.LostUpdatesPaused, r.NonLinearizable, r.NoMajorityGrants, r.LateGrants, r.LateGrantsStalled, r.GhostLocks, r.Snapshots)
	if r.ReportedGhosts > 0 || len(r.ReportsUnfound) > 0 {
		fmt.Fprintf(w, "  ghost locks the proxies reported at their shutdown: %d found; reported and not found: %v\n", r.ReportedGhosts, r.ReportsUnfound)
	}
	fmt.Fprintf(w, "  fencing: %d numbers on %d grants (%d nil, %d errors), %d grants breaking the contract; fenced registers refused %d writes (%d reads and writes in all)\n",
		r.Fenced, r.FencedGrants, r.FenceNil, r.FenceErrors, r.FenceViolations, r.StaleWritesRefused, r.FencedRefusals)
	if r.FreeRefusals > 0 {
		fmt.Fprintf(w, "  liveness: %d acquires of keys nobody else uses not granted\n", r.FreeRefusals)
	}
	fmt.Fprintf(w, "  grants per second: %v\n", r.GrantsPerSecond)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  PROBLEM: %s\n", p)
	}
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  example: %s\n", e)
	}
	for _, l := range r.Losses {
		fmt.Fprintf(w, "  hold: %s\n", l)
	}
	for _, e := range r.UnknownErrors {
		fmt.Fprintf(w, "  unknown: %s\n", e)
	}
	for _, e := range r.Slowest {
		fmt.Fprintf(w, "  slow: %s\n", e)
	}
	if len(r.Stalls) > 0 {
		fmt.Fprintf(w, "  harness process stalls: %s\n", strings.Join(r.Stalls, ", "))
	}
	for _, v := range r.Visualized {
		fmt.Fprintf(w, "  visualization: %s\n", v)
	}
	if faults {
		for _, f := range r.Relays {
			fmt.Fprintf(w, "  %s\n", f)
		}
		for _, f := range r.Faults {
			fmt.Fprintf(w, "  fault: %s\n", f)
		}
	}
}

// WriteTable writes one row per report.
func WriteTable(w io.Writer, reps []*Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	cols := []string{"scenario", "quarantine", "secs", "holds", "refusals", "unknowns", "releases", "rel-not-held", "rel-unknown",
		"min-grants/s", "empty-s", "starved-s", "free-refused", "windows", "lost-upd", "non-lin", "no-maj", "late", "ghosts", "fenced", "fence", "verdict"}
	fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
	for _, r := range reps {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n",
			r.Scenario, r.Quarantine, r.Duration.Seconds(), r.Holds, r.Refusals, r.Unknowns,
			r.Releases, r.ReleasesNotHeld, r.ReleaseUnknowns, r.MinGrantsPerSecond, r.EmptySeconds, r.StarvedSeconds, r.FreeRefusals,
			r.WindowViolations, r.LostUpdates, r.NonLinearizable, r.NoMajorityGrants, r.LateGrants, r.GhostLocks, r.Fenced, r.FenceViolations, r.Verdict())
	}
	tw.Flush()
}
