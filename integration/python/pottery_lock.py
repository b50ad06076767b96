"""pottery's Redlock, unchanged, against one Redis address.

Its masters are the one address given (a lone Redis, or redlock-proxy in
front of several). The trace and command line are lockprog.py's. Run with
the virtualenv that ./test.sh makes from requirements.txt:

    .venv/bin/python pottery_lock.py --addr 127.0.0.1:6379 --scenario lifecycle
"""

import sys
import time
from importlib.metadata import version

import redis
from pottery import ExtendUnlockedLock, Redlock, ReleaseUnlockedLock

from lockprog import Ages, check, contention, expect_raises, handoff, main


def redlock(r, key, seconds, **kw):
    return Redlock(key=key, masters={r}, auto_release_time=seconds, **kw)


def scenario_lifecycle(r, key, trace, args):
    """acquire, refused (at once and after a timeout), locked(), extend,
    release by another and by the holder, the context manager."""
    a = redlock(r, key, 10)
    check(a.acquire(blocking=False) is True, "acquire(blocking=False) of a free lock returned False")
    age = Ages()
    trace.emit("acquire", key=a.key, token=a._uuid, ttl_ms=10000)
    check(9 < a.locked() <= 10, f"locked() of the holder is {a.locked()}; want just under 10 (seconds)")

    b = redlock(r, key, 10)
    check(b.acquire(blocking=False) is False, "acquire(blocking=False) of a held lock returned True")
    start = time.monotonic()
    check(b.acquire(timeout=0.4) is False, "acquire(timeout=0.4) of a held lock returned True")
    waited = time.monotonic() - start
    check(waited >= 0.3, f"acquire(timeout=0.4) gave up after {waited:.3f}s")
    check(b.locked() == 0, "locked() of a client that was refused is not 0")
    expect_raises(ExtendUnlockedLock, b.extend, "extend by a client that was refused")
    trace.emit("refused", key=a.key, token=b._uuid, holder=a._uuid, ttl_ms=10000, age_ms=age())

    expect_raises(ReleaseUnlockedLock, b.release, "release by a client that does not hold it")
    trace.emit("not-owner", key=a.key, token=a._uuid, other=b._uuid, ttl_ms=10000, age_ms=age())

    time.sleep(0.3)
    a.extend()
    trace.emit("extend", key=a.key, token=a._uuid, ttl_ms=10000)
    check(a.locked() > 9, f"locked() after extend is {a.locked()}; want just under 10")

    a.release()
    trace.emit("release", key=a.key, token=a._uuid)
    check(a.locked() == 0, "locked() after release is not 0")
    expect_raises(ReleaseUnlockedLock, a.release, "a second release")

    with b:
        check(b.locked() > 9, "the context manager does not hold the lock")
        trace.emit("acquire", key=b.key, token=b._uuid, ttl_ms=10000)
    trace.emit("release", key=b.key, token=b._uuid)


def scenario_not_owned(r, key, trace, args):
    """After expiry the old holder can neither extend nor release, nor touch
    the next holder's lock."""
    a = redlock(r, key, 0.5)
    check(a.acquire(blocking=False), "acquire of a free lock failed")
    trace.emit("acquire", key=a.key, token=a._uuid, ttl_ms=500)
    deadline = time.monotonic() + 5
    while a.locked():
        check(time.monotonic() < deadline, "a 0.5s lock was still held after 5s")
        time.sleep(0.05)
    # Through the proxy locked() reports the validity left, which ends the
    # drift allowance before the masters' copies expire: wait that out.
    time.sleep(0.1)
    expect_raises(ExtendUnlockedLock, a.extend, "extend after expiry")
    trace.emit("expired", key=a.key, token=a._uuid)

    b = redlock(r, key, 10)
    check(b.acquire(blocking=False), "acquire of an expired lock failed")
    trace.emit("acquire", key=b.key, token=b._uuid, ttl_ms=10000)
    expect_raises(ExtendUnlockedLock, a.extend, "extend by the expired holder")
    expect_raises(ReleaseUnlockedLock, a.release, "release by the expired holder")
    trace.emit("not-owner", key=b.key, token=b._uuid, other=a._uuid, ttl_ms=10000)
    b.release()
    trace.emit("release", key=b.key, token=b._uuid)


def scenario_handoff(r, key, trace, args):
    """A thread blocks in acquire() while another holds the lock, and gets
    it once that one releases."""
    a = redlock(r, key, 10)
    check(a.acquire(blocking=False), "acquire of a free lock failed")
    trace.emit("acquire", key=a.key, token=a._uuid, ttl_ms=10000)
    w = redlock(r, key, 10)

    def wait():
        check(w.acquire(timeout=20) is True, "the blocking acquire gave up")
        return w._uuid, w.release

    token, finish = handoff(a._uuid, a.release, wait)
    trace.emit("handoff", key=w.key, token=token, other=a._uuid, ttl_ms=10000)
    finish()
    trace.emit("release", key=w.key, token=token)


def scenario_contention(r, key, trace, args):
    """Threads increment a shared counter, each inside `with Redlock(...)`."""
    def run_locked(body):
        if args.no_lock:
            return body()
        with redlock(r, key, 5, context_manager_timeout=60):
            body()

    contention(redlock(r, key, 5).key, trace, args, run_locked)


SCENARIOS = {
    "lifecycle": scenario_lifecycle,
    "not-owned": scenario_not_owned,
    "handoff": scenario_handoff,
    "contention": scenario_contention,
}


def connect(host, port):
    return redis.Redis(host=host, port=port, socket_timeout=10, socket_connect_timeout=5)


if __name__ == "__main__":
    sys.exit(main(__doc__, SCENARIOS, connect, lambda: f"pottery {version('pottery')}, redis-py {redis.__version__}"))
