package netio

import (
	"errors"
	"fmt"
)

// Why a command got no reply. Each is wrapped in a *BackendError.
var (
	ErrDown       = errors.New("netio: backend not connected")
	ErrTimeout    = errors.New("netio: no reply within the per-backend timeout")
	ErrConnLost   = errors.New("netio: connection lost before the reply")
	ErrOverloaded = errors.New("netio: too many commands waiting for this backend")
	ErrClosed     = errors.New("netio: link closed")
	ErrAbandoned  = errors.New("netio: undo abandoned: too many undos wait for this backend")
	ErrExpired    = errors.New("netio: undo dropped: its lock expired before it could run")
)

// BackendError names the backend a failure came from.
type BackendError struct {
	Node int
	Addr string
	Err  error
}

func (e *BackendError) Error() string {
	return fmt.Sprintf("backend %d (%s): %v", e.Node, e.Addr, e.Err)
}

func (e *BackendError) Unwrap() error { return e.Err }
