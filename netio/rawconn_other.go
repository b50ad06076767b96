//go:build !linux

package netio

import "net"

// Raw returns c as it is: the direct socket calls of the Linux build (see
// rawconn.go) are an optimisation, and every other platform uses the
// runtime's own net.Conn.
func Raw(c net.Conn) net.Conn { return c }
