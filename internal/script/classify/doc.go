// Package classify understands the Lua lock scripts that client libraries
// send by what they do, and gives the proxy what it needs to run them as
// quorum operations: a role, where the role's arguments are, and the reply
// the script gives on one Redis in each case.
//
// A script is run in a sandbox (package sandbox: gopher-lua with a redis
// table of its own over an in-memory model of its keys, on a clock that
// stands still at the real time, its syntax checked first and its
// instructions and library calls bounded) against probe states
// of its keys, with the call's real number of keys and arguments and with
// variants of them (classify.go, candidates.go, shapecands.go, refine.go,
// verify.go). What it
// does to the keys in every probe must be what one role does
// (package spec: semantics.go, and shapes.go for a lock kept as a sorted set of owners;
// semaphore.go reads a counting semaphore's operations the same way; keys
// beside the lock keys, a latch for retries and a counter of grants, are
// checked in side.go, a signal list as a release's notice in noticecheck.go,
// and a call of several keys each on its own is read key by key in
// each.go);
// its replies in each case must follow one template. Otherwise it is
// refused, with the probe that showed it. The classification holds for
// the number of keys and arguments and the values of the control
// arguments it was made with, and only for calls whose arguments stand in
// the same relations as that call's (spec/relations.go: equal or not to each
// constant of the script's text, above or below each number constant,
// numeric or not, sign, whole or not, and equal, above or below each
// other); Registry caches it by them, and a call in other relations is
// classified as a call of its own. Library facts
// (facts.go) and the configuration give classifications for SHA1s whose
// text the proxy has not seen.
//
// It promises: Classify never panics and stays within fixed bounds of
// instructions and memory whatever the script; a script is classified
// only if, on every probe, it did what its role does and replied what its
// templates say; the backends never run a classified script's text, only
// the role's reference script (spec/reference.go); time is real time: TIME
// answers the clock and a deadline argument (PXAT, PEXPIREAT) is a
// deadline, never a duration read against a fixed clock (Class.TTL gives
// what is left of it); the commands a script may use are one list
// (sandbox/commands.go), the same for the sandbox and for guard.Script, which is the only
// form in which a refused script's text reaches a backend (the vote
// policy): checked, written back, and run with every command checked.
//
// Why the probes suffice. Mutual exclusion does not rest on the
// classification at all. Whatever a script is classified as, the backends
// run one of the fixed reference scripts, which can only: set keys that
// are free, each to its caller's token, with a TTL the proxy checked
// against max_ttl (acquire, extend-or-acquire); re-arm or lengthen, within
// max_ttl, or delete keys that hold the caller's token (extend, release);
// add the caller to a lock of several owners that no other holds
// exclusively, re-score or remove the caller's own member (the same roles,
// and share, for ShapeOwners; ShapeHash keeps a string lock's roles in a
// hash whose one field is the owner and, Counted, adds or takes off one of
// the owner's holds there, deleting the lock at none, while the proxy's
// repair sets that count only where the field is still the caller's);
// delete whatever holds the keys, as the DEL
// command already does (delete); or read. Under a call's latch
// (Layout.Latch) a reference also records its own answer in the free
// latch key, with a TTL within max_ttl, and answers a call that finds it
// there with it, doing nothing. None can take a key from another
// holder or leave a key without expiry, and the proxy votes on them and
// checks validity as for SET NX.
// So a classification that is wrong can only give a client the role's
// effect and reply where its own script would have done something else;
// in the worst case a script that would have misbehaved on one Redis
// behaves, through the proxy, as the lock operation it resembles.
//
// What can still surprise the classifier, within that bound: a script
// that treats some value specially where neither the probes nor the
// relations look (a value it computes from an argument, a prefix, a
// length or ARGV[2] / 1000, and compares; a constant it builds at run
// time; the byte order of two strings; a key name it tests), a
// combination of several keys' states other than "all alike" and "one
// differs", and differences between gopher-lua and Redis's Lua 5.1 or
// between the model and Redis for the allowed commands (the tests run
// classified scripts and their reference scripts on a real redis-server,
// and the model command by command against it, to keep those small); a
// lock of several owners whose marker the script builds at run time, or
// whose owners' deadlines passed while the set lives on. Most of these
// change the reply a client sees, not which client holds a lock. Two do
// not: a script that refuses to re-enter for an owner it recognises by a
// computed value (a token that starts with "anon:") is taken for an
// extend-or-acquire for that owner too, when an ordinary owner's call was
// classified first, so two clients sharing that token would both hold
// the lock; and a script that reads the TTL argument in another unit for
// values it tells apart by computing would have its caller count on a
// lock the masters keep for a different time. The TTL variants therefore
// include a very small TTL (7 ms, or 1 s) beside 1234 ms and 59999 ms, the
// ranges where such a switch is plausible; a threshold written as a
// constant (ttl < 1000) is a relation, and each side is classified on its
// own.
//
// One latitude is the libraries' own: a script that treats a value as the
// caller's when its first P bytes equal the token's (bsm/redislock) is
// classified with that prefix, and the proxy then lets a caller re-take or
// extend a lock whose value starts with the same P bytes, as one Redis
// with that library would.
package classify
