"""redis-py's Lock, unchanged, against one Redis address.

The trace and command line are lockprog.py's. Run with Debian's python3
(python3-redis):

    /usr/bin/python3 redispy_lock.py --addr 127.0.0.1:6379 --scenario lifecycle
"""

import sys
import threading
import time
import uuid

import redis
from redis.exceptions import LockError, LockNotOwnedError, ResponseError

from lockprog import check, contention, expect_raises, handoff, main, text


def scenario_lifecycle(r, key, trace, args):
    """acquire (non-blocking and blocking with a timeout), locked, owned,
    additive and replacing extend, reacquire, release."""
    a = r.lock(key, timeout=10, sleep=0.05)
    check(a.acquire(blocking=False) is True, "non-blocking acquire of a free lock returned False")
    acquired_at = time.monotonic()
    trace.emit("acquire", key=key, token=text(a.local.token), ttl_ms=10000)
    check(a.locked(), "locked() is False while held")
    check(a.owned(), "owned() is False for the holder")

    b = r.lock(key, timeout=10, sleep=0.05)
    other = "other-" + uuid.uuid4().hex
    check(b.acquire(blocking=False, token=other) is False, "non-blocking acquire of a held lock returned True")
    start = time.monotonic()
    got = b.acquire(blocking=True, blocking_timeout=0.4, token=other)
    waited = time.monotonic() - start
    check(got is False, "blocking acquire with blocking_timeout got a held lock")
    check(waited >= 0.3, f"blocking acquire gave up after {waited:.3f}s; blocking_timeout is 0.4s")
    check(b.locked(), "locked() is False for a second client while the lock is held")
    check(not b.owned(), "owned() is True for a client that was refused")
    trace.emit("refused", key=key, token=other, holder=text(a.local.token), ttl_ms=10000,
               age_ms=int((time.monotonic() - acquired_at) * 1000))

    check(a.extend(5) is True, "extend(5) returned False")
    pttl = r.pttl(key)
    check(12000 < pttl <= 15000, f"PTTL after extend(5) of a 10s lock is {pttl}; want about 15000")
    trace.emit("extend", key=key, token=text(a.local.token), ttl_ms=15000)

    check(a.extend(4, replace_ttl=True) is True, "extend(4, replace_ttl=True) returned False")
    pttl = r.pttl(key)
    check(2000 < pttl <= 4000, f"PTTL after extend(4, replace_ttl=True) is {pttl}; want about 4000")
    trace.emit("extend", key=key, token=text(a.local.token), ttl_ms=4000)

    check(a.reacquire() is True, "reacquire() returned False")
    pttl = r.pttl(key)
    check(8000 < pttl <= 10000, f"PTTL after reacquire() is {pttl}; want about 10000 (the timeout)")
    trace.emit("reacquire", key=key, token=text(a.local.token), ttl_ms=10000)

    token = text(a.local.token)
    a.release()
    check(not a.locked(), "locked() is True after release")
    check(not a.owned(), "owned() is True after release")
    trace.emit("release", key=key, token=token)
    e = expect_raises(LockError, a.release, "release of a lock not held")
    check(not isinstance(e, LockNotOwnedError), "a second release raised LockNotOwnedError; want plain LockError")

    # Free again: the refused client gets it at once.
    check(b.acquire(blocking=False, token=other) is True, "acquire after release returned False")
    trace.emit("acquire", key=key, token=other, ttl_ms=10000)
    b.release()
    trace.emit("release", key=key, token=other)


def scenario_not_owned(r, key, trace, args):
    """LockNotOwnedError after expiry and for a client whose lock another
    client now holds; neither may touch the new holder's lock."""
    a = r.lock(key, timeout=0.5, sleep=0.05)
    check(a.acquire(blocking=False), "acquire of a free lock failed")
    a_token = text(a.local.token)
    trace.emit("acquire", key=key, token=a_token, ttl_ms=500)
    deadline = time.monotonic() + 5
    while a.locked():
        check(time.monotonic() < deadline, "a 0.5s lock was still held after 5s")
        time.sleep(0.05)
    check(not a.owned(), "owned() is True after expiry")
    expect_raises(LockNotOwnedError, lambda: a.extend(1), "extend after expiry")
    expect_raises(LockNotOwnedError, a.reacquire, "reacquire after expiry")
    trace.emit("expired", key=key, token=a_token)

    b = r.lock(key, timeout=10, sleep=0.05)
    check(b.acquire(blocking=False), "acquire of an expired lock failed")
    b_token = text(b.local.token)
    trace.emit("acquire", key=key, token=b_token, ttl_ms=10000)
    expect_raises(LockNotOwnedError, lambda: a.extend(30, replace_ttl=True), "extend by a non-owner")
    expect_raises(LockNotOwnedError, a.reacquire, "reacquire by a non-owner")
    expect_raises(LockNotOwnedError, a.release, "release by a non-owner")
    check(b.owned(), "the holder lost its lock to a non-owner's extend or release")
    pttl = r.pttl(key)
    check(0 < pttl <= 10000, f"PTTL {pttl} after a non-owner's extend(30); the holder's lock is 10s")
    trace.emit("not-owner", key=key, token=b_token, other=a_token, ttl_ms=10000)
    b.release()
    trace.emit("release", key=key, token=b_token)


def scenario_handoff(r, key, trace, args):
    """One thread blocks in acquire while another holds the lock, and gets
    it once that one releases (one Lock object, thread-local tokens)."""
    lock = r.lock(key, timeout=10, sleep=0.02)
    check(lock.acquire(blocking=False), "acquire of a free lock failed")
    first = text(lock.local.token)
    trace.emit("acquire", key=key, token=first, ttl_ms=10000)

    def wait():
        check(lock.acquire(blocking=True, blocking_timeout=20) is True, "the blocking acquire gave up")
        return text(lock.local.token), lock.release

    token, finish = handoff(first, lock.release, wait)
    trace.emit("handoff", key=key, token=token, other=first, ttl_ms=10000)
    finish()
    trace.emit("release", key=key, token=token)


def scenario_contention(r, key, trace, args):
    """Threads increment a shared counter under the lock (lockprog's
    contention)."""
    def run_locked(body):
        if args.no_lock:
            return body()
        with r.lock(key, timeout=5, sleep=0.005, blocking_timeout=60):
            body()

    contention(key, trace, args, run_locked)


def scenario_long(r, key, trace, args):
    """A five-minute lock, as a job scheduler takes one: Lock(timeout=300),
    extended by another five minutes, then released."""
    lock = r.lock(key, timeout=300)
    check(lock.acquire(blocking=False) is True, "acquire of a free lock with timeout=300 returned False")
    token = text(lock.local.token)
    trace.emit("acquire", key=key, token=token, ttl_ms=300000)
    check(r.lock(key, timeout=300).acquire(blocking=False) is False, "a second acquire of a held lock returned True")
    check(lock.extend(300, replace_ttl=True) is True, "extend(300, replace_ttl=True) returned False")
    trace.emit("extend", key=key, token=token, ttl_ms=300000)
    lock.release()
    trace.emit("release", key=key, token=token)


def scenario_no_expiry(r, key, trace, args):
    """Lock() without timeout asks for a lock that never expires: SET NX
    without PX. One Redis grants it; the proxy refuses it with a message that
    says to give the lock a timeout, and holds nothing. The refusal reaches
    the caller as ResponseError from acquire()."""
    lock = r.lock(key)
    try:
        got = lock.acquire(blocking=False)
    except ResponseError as e:
        trace.emit("refused-no-expiry", key=key, error=str(e))
        check(not lock.locked(), "the lock is held after its refused acquire")
        trace.emit("release", key=key, token=text(lock.local.token))
        return
    check(got is True, "acquire() without timeout of a free lock returned False")
    token = text(lock.local.token)
    check(r.pttl(key) == -1, "a lock without timeout has a TTL")
    trace.emit("no-expiry", key=key, token=token)
    lock.release()
    trace.emit("release", key=key, token=token)


def scenario_holds(r, key, trace, args):
    """Threads take and release the lock on the key given, for --seconds,
    and report each hold as {"step": "hold", "from": t, "to": t} in wall
    clock seconds (from just after the acquire returned to just before the
    release), so that a caller can check them against other holders."""
    deadline = time.time() + args.seconds
    errors = []

    def worker():
        try:
            while time.time() < deadline:
                lock = r.lock(key, timeout=1, sleep=0.002, blocking_timeout=0.05)
                if not lock.acquire():
                    continue
                start = time.time()
                time.sleep(0.002)
                end = time.time()
                trace.emit("hold", key=key, **{"from": start, "to": end})
                lock.release()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(f"{type(e).__name__}: {e}")

    workers = [threading.Thread(target=worker, name=f"holder-{i}") for i in range(args.threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(args.seconds + 30)
    check(not errors, f"holders failed: {errors[:3]}")


SCENARIOS = {
    "lifecycle": scenario_lifecycle,
    "holds": scenario_holds,
    "not-owned": scenario_not_owned,
    "handoff": scenario_handoff,
    "contention": scenario_contention,
    "long": scenario_long,
    "no-expiry": scenario_no_expiry,
}


def connect(host, port):
    return redis.Redis(host=host, port=port, socket_timeout=10, socket_connect_timeout=5)


if __name__ == "__main__":
    sys.exit(main(__doc__, SCENARIOS, connect, lambda: "redis-py " + redis.__version__))
