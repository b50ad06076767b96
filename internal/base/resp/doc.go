// Package resp is the RESP vocabulary shared by the proxy's front end and its
// backend links: a decoded reply (Value), a bounded reply reader, the one
// RESP encoder (encode.go: redcon's encoders, and the RESP3 forms with
// their RESP2 fallbacks), and the scripts sent by EVALSHA (Script).
//
// It promises: the reader never allocates more than its configured limits for
// one reply, never panics on any input, and encoding is allocation-free when the
// destination has capacity.
package resp
