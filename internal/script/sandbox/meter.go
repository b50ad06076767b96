package sandbox

import (
	"errors"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// The instruction meter: gopher-lua consults it before every instruction,
// so a script runs at most its step budget and stops the moment it is
// refused.

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

var errStopped = errors.New("script stopped by the classifier")

// meter is the context gopher-lua consults before every instruction: it
// counts instructions, watches registers for long strings when the script
// concatenates, and stops the script once it is refused.
type meter struct {
	L     *lua.LState
	left  int
	scan  bool
	ref   *Stop
	steps int
	// maxStr bounds the strings watched (the program's).
	maxStr int
}

func (m *meter) Deadline() (time.Time, bool) { return time.Time{}, false }

func (m *meter) Value(any) any { return nil }

func (m *meter) Err() error {
	if m.ref != nil {
		return errStopped
	}
	return nil
}

func (m *meter) Done() <-chan struct{} {
	if m.ref != nil {
		return closedCh
	}
	m.steps++
	if m.steps > m.left {
		m.ref = Refuse(RefuseBudget, "runs more than %d Lua instructions", m.left)
		return closedCh
	}
	if m.scan {
		for i := m.L.GetTop(); i > 0; i-- {
			if s, ok := m.L.Get(i).(lua.LString); ok && len(s) > m.maxStr {
				m.ref = Refuse(RefuseBudget, "builds a string longer than %d bytes", m.maxStr)
				return closedCh
			}
		}
	}
	return nil
}

// stop refuses the run from inside a library function.
func (m *meter) stop(L *lua.LState, r *Stop) int {
	if m.ref == nil {
		m.ref = r
	}
	L.RaiseError("%s", errStopped.Error())
	return 0
}
