package redisproc

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// A Clock moves the wall clock of one redis-server process, the clock it
// expires keys by, while the machine's clock and every other process's stay
// as they are: what an NTP step, a date set by hand or a virtual machine's
// corrected clock does to a master. The server runs with a small preloaded
// library (compiled with the machine's C compiler when first needed) that
// adds a shift, read from a file the test writes, to every reading of the
// real-time clock (clock_gettime, gettimeofday, time). The monotonic clock
// is left alone, as a stepped system clock leaves it.
//
// libfaketime does not serve here: its start-up allocates inside the
// allocator's own initialisation and Debian's redis-server (jemalloc)
// crashes under it. This library allocates nothing and reads the real
// clock with the system call itself.
type Clock struct {
	mu    sync.Mutex
	file  *os.File
	shift time.Duration
}

// clockShiftSource is the preloaded library. The shift is a little-endian
// int64 of microseconds at the start of the file named by
// REDISPROC_CLOCK_SHIFT, mapped once at start-up.
const clockShiftSource = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *shift_us;

__attribute__((constructor)) static void shift_init(void) {
	const char *path = getenv("REDISPROC_CLOCK_SHIFT");
	if (path == NULL) return;
	int fd = open(path, O_RDONLY);
	if (fd < 0) return;
	void *m = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m != MAP_FAILED) shift_us = m;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int r = (int)syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && shift_us != NULL && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		int64_t us = *shift_us;
		int64_t ns = (int64_t)ts->tv_nsec + (us % 1000000) * 1000;
		ts->tv_sec += us / 1000000 + ns / 1000000000;
		ns %= 1000000000;
		if (ns < 0) { ns += 1000000000; ts->tv_sec--; }
		ts->tv_nsec = ns;
	}
	return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	(void)tz;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
	if (tv != NULL) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
	if (t != NULL) *t = ts.tv_sec;
	return ts.tv_sec;
}
`

// StartWithClock runs redis-server as Start does, with a Clock to move its
// wall clock. It needs a C compiler (cc) to build the preloaded library.
func StartWithClock(dir string, extra ...string) (*Server, *Clock, error) {
	lib, err := buildClockShift(dir)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.CreateTemp(dir, "clock-shift-*")
	if err != nil {
		return nil, nil, fmt.Errorf("redisproc: clock shift file: %w", err)
	}
	c := &Clock{file: f}
	if err := c.write(); err != nil {
		f.Close()
		return nil, nil, err
	}
	env := []string{"LD_PRELOAD=" + lib, "REDISPROC_CLOCK_SHIFT=" + f.Name()}
	s, err := startOnFreePort(func(s *Server) { s.dir, s.extra, s.env = dir, extra, env })
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return s, c, nil
}

// buildClockShift compiles the preloaded library into dir.
func buildClockShift(dir string) (string, error) {
	src := filepath.Join(dir, "clockshift.c")
	lib := filepath.Join(dir, "clockshift.so")
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	if err := os.WriteFile(src, []byte(clockShiftSource), 0o644); err != nil {
		return "", fmt.Errorf("redisproc: clock shift library: %w", err)
	}
	out, err := exec.Command("cc", "-O2", "-shared", "-fPIC", "-o", lib, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("redisproc: compiling the clock shift library (a C compiler is needed: apt-get install -y gcc libc6-dev): %w: %s", err, out)
	}
	return lib, nil
}

// Shift moves the server's wall clock by d (ahead when positive), on top
// of any earlier shift. It takes effect at the server's next reading.
func (c *Clock) Shift(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shift += d
	return c.write()
}

// Close releases the shift file (the server keeps its last shift).
func (c *Clock) Close() error { return c.file.Close() }

func (c *Clock) write() error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(c.shift.Microseconds()))
	if _, err := c.file.WriteAt(b[:], 0); err != nil {
		return fmt.Errorf("redisproc: writing the clock shift: %w", err)
	}
	return nil
}
