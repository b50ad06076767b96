// Package guard is the only form in which a script the classifier refused
// reaches a backend (the vote policy): its text is checked, written back
// as plain Lua of the proxy's own, and run inside a function whose redis
// table checks every command first.
//
// It promises: Script never panics; a script it accepts is written back
// in one canonical form that parses, and writing that back again leaves
// it as it is; at run time a command outside the sandbox's list, a key
// that is not one of the call's KEYS or is the proxy's own, or a SET
// without expiry is refused, and a key the script left without expiry or
// beyond max_ttl is deleted and the call answered with an error.
package guard
