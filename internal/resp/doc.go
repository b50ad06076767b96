// Package resp is the RESP vocabulary shared by the proxy's front end and its
// backend links: a decoded reply (Value), a bounded reply reader, command
// encoding, and the small types that carry one backend's answer to one
// command back to whoever asked (Result, Receiver, Script).
//
// It promises: the reader never allocates more than its configured limits for
// one reply, never panics on any input, and encoding is allocation-free when the
// destination has capacity.
package resp
