"""redlock-py's Redlock, unchanged, against one Redis address.

Its one server is the address given (a lone Redis, or redlock-proxy in
front of several). redlock-py keeps no handle on a refused attempt's
token: Recorded, a subclass that only notes each token get_unique_id()
returns, lets the trace name it. The trace and command line are
lockprog.py's. Run with the virtualenv that ./test.sh makes from
requirements.txt:

    .venv/bin/python redlockpy_lock.py --addr 127.0.0.1:6379 --scenario lifecycle
"""

import sys
import time
from importlib.metadata import version

import redis
import redlock

from lockprog import Ages, check, contention, handoff, main, text


class Recorded(redlock.Redlock):
    last = None

    def get_unique_id(self):
        self.last = super().get_unique_id()
        return self.last


def manager(server, **kw):
    return Recorded([server], **kw)


def locked(server, key):
    """Whether key is held, read with a plain GET (redlock-py has no query)."""
    return redis.Redis(**server).get(key) is not None


def scenario_lifecycle(server, key, trace, args):
    """lock, refused, unlock by another (ignored) and by the holder."""
    dlm = manager(server, retry_count=1)
    lk = dlm.lock(key, 10000)
    check(lk is not False, "lock() of a free resource returned False")
    age = Ages()
    check(9000 < lk.validity <= 10000, f"validity {lk.validity}; want just under 10000 ms")
    check(lk.resource == key, f"the lock's resource is {lk.resource!r}")
    trace.emit("acquire", key=key, token=text(lk.key), ttl_ms=10000)

    other = manager(server, retry_count=2, retry_delay=0.05)
    check(other.lock(key, 10000) is False, "lock() of a held resource did not return False")
    trace.emit("refused", key=key, token=text(other.last), holder=text(lk.key), ttl_ms=10000, age_ms=age())

    other.unlock(redlock.Lock(0, key, other.last))
    trace.emit("not-owner", key=key, token=text(lk.key), other=text(other.last), ttl_ms=10000, age_ms=age())

    dlm.unlock(lk)
    trace.emit("release", key=key, token=text(lk.key))
    check(not locked(server, key), "the resource is held after unlock")
    dlm.unlock(lk)  # a second unlock does nothing

    lk = other.lock(key, 10000)
    check(lk is not False, "lock() after unlock returned False")
    trace.emit("acquire", key=key, token=text(lk.key), ttl_ms=10000)
    other.unlock(lk)
    trace.emit("release", key=key, token=text(lk.key))


def scenario_not_owned(server, key, trace, args):
    """After expiry the old holder's unlock leaves the next holder's lock."""
    dlm = manager(server, retry_count=1)
    old = dlm.lock(key, 500)
    check(old is not False, "lock() of a free resource returned False")
    trace.emit("acquire", key=key, token=text(old.key), ttl_ms=500)
    deadline = time.monotonic() + 5
    while locked(server, key):
        check(time.monotonic() < deadline, "a 0.5s lock was still held after 5s")
        time.sleep(0.05)
    trace.emit("expired", key=key, token=text(old.key))

    new = dlm.lock(key, 10000)
    check(new is not False, "lock() of an expired resource returned False")
    trace.emit("acquire", key=key, token=text(new.key), ttl_ms=10000)
    dlm.unlock(old)
    trace.emit("not-owner", key=key, token=text(new.key), other=text(old.key), ttl_ms=10000)
    dlm.unlock(new)
    trace.emit("release", key=key, token=text(new.key))


def scenario_handoff(server, key, trace, args):
    """A thread retries lock() while another holds the resource, and gets
    it once that one unlocks."""
    dlm = manager(server, retry_count=1)
    first = dlm.lock(key, 10000)
    check(first is not False, "lock() of a free resource returned False")
    trace.emit("acquire", key=key, token=text(first.key), ttl_ms=10000)
    waiter = manager(server, retry_count=1000, retry_delay=0.02)

    def wait():
        lk = waiter.lock(key, 10000)
        check(lk is not False, "the waiter gave up")
        return text(lk.key), lambda: waiter.unlock(lk)

    token, finish = handoff(text(first.key), lambda: dlm.unlock(first), wait)
    trace.emit("handoff", key=key, token=token, other=text(first.key), ttl_ms=10000)
    finish()
    trace.emit("release", key=key, token=token)


def scenario_contention(server, key, trace, args):
    """Threads increment a shared counter between lock() and unlock()."""
    dlm = manager(server, retry_count=1)

    def run_locked(body):
        if args.no_lock:
            return body()
        deadline = time.monotonic() + 60
        while (lk := dlm.lock(key, 5000)) is False:
            check(time.monotonic() < deadline, "lock() kept failing for 60s")
            time.sleep(0.003)
        try:
            body()
        finally:
            dlm.unlock(lk)

    contention(key, trace, args, run_locked)


SCENARIOS = {
    "lifecycle": scenario_lifecycle,
    "not-owned": scenario_not_owned,
    "handoff": scenario_handoff,
    "contention": scenario_contention,
}


def connect(host, port):
    return {"host": host, "port": port, "socket_timeout": 10, "socket_connect_timeout": 5}


if __name__ == "__main__":
    sys.exit(main(__doc__, SCENARIOS, connect,
                  lambda: f"redlock-py {version('redlock-py')}, redis-py {redis.__version__}"))
