// Package sandbox runs a Lua script as one Redis would, on a model of its
// keys: gopher-lua with a redis table of its own (sandbox.go) over an
// in-memory model of strings, hashes, sets, sorted sets and lists
// (model.go, commands.go), on a clock that stands still at the real time.
// walker.go checks a script's syntax and gathers its constants first,
// meter.go bounds its instructions, bounded.go its library calls, and
// luaresp.go converts its values to and from RESP.
//
// It promises: a run never panics and stays within fixed bounds of
// instructions and memory whatever the script; a run never changes the
// state it was given (it works on a copy); the commands a script may use
// are one list (commands.go), the same for the sandbox and for the guard;
// a run that does something the classifier does not accept stops with a
// Stop that says why, which the script cannot catch.
package sandbox
