"""redis-py's Lock, unchanged, against one Redis address.

Runs one scenario against the address given (a lone Redis, or redlock-proxy
in front of several masters) and checks every result the library returns.
After each step that changes what the server holds it prints one JSON line
on stdout (the trace) and, with --wait-ack, waits for a line on stdin, so
that a caller can check each master while the lock is in that state. The
last line is {"step": "done"} and the exit status 0; on a failed check or an
error from the server the last line is {"step": "error", ...} and the exit
status 1.

Run with Debian's python3 (python3-redis):

    /usr/bin/python3 redispy_lock.py --addr 127.0.0.1:6379 --scenario lifecycle
"""

import argparse
import json
import sys
import threading
import time
import traceback
import uuid

import redis
from redis.exceptions import LockError, LockNotOwnedError


class CheckFailed(Exception):
    """A result of the library that is not what one Redis gives."""


def check(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def text(token):
    return token.decode() if isinstance(token, bytes) else token


class Trace:
    def __init__(self, wait_ack):
        self.wait_ack = wait_ack
        self.lock = threading.Lock()

    def emit(self, step, **fields):
        fields["step"] = step
        with self.lock:
            sys.stdout.write(json.dumps(fields) + "\n")
            sys.stdout.flush()
            if self.wait_ack and step not in ("done", "error"):
                if not sys.stdin.readline():
                    raise CheckFailed("the checker went away")


def expect_raises(exc_type, fn, what):
    try:
        fn()
    except exc_type as e:
        return e
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        raise CheckFailed(f"{what}: raised {type(e).__name__}: {e}; want {exc_type.__name__}") from e
    raise CheckFailed(f"{what}: returned normally; want {exc_type.__name__}")


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

    state = {}
    may_release = threading.Event()

    def waiter():
        try:
            state["got"] = lock.acquire(blocking=True, blocking_timeout=20)
            state["at"] = time.monotonic()
            state["token"] = text(lock.local.token)
            may_release.wait(30)
            lock.release()
            state["released"] = True
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            state["error"] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=waiter, name="waiter")
    t.start()
    try:
        time.sleep(0.5)
        check("at" not in state and "error" not in state, f"the waiter did not block while the lock was held: {state}")
        released_at = time.monotonic()
        lock.release()
        deadline = time.monotonic() + 10
        while "at" not in state and "error" not in state:
            check(time.monotonic() < deadline, "the waiter did not get the lock within 10s of its release")
            time.sleep(0.01)
        check("error" not in state, f"waiter: {state.get('error')}")
        check(state["got"] is True, "the blocking acquire gave up")
        check(state["at"] >= released_at, "the waiter got the lock before it was released")
        check(state["token"] != first, "the waiter holds the first thread's token")
        trace.emit("handoff", key=key, token=state["token"], other=first, ttl_ms=10000)
    finally:
        may_release.set()
        t.join(30)
    check(not t.is_alive(), "the waiter did not finish")
    check("error" not in state, f"waiter: {state.get('error')}")
    check(state.get("released"), "the waiter did not release")
    trace.emit("release", key=key, token=state["token"])


def scenario_contention(r, key, trace, args):
    """Threads increment a shared counter under the lock with a pause
    between read and write; with the lock no update is lost and no two
    threads are ever inside at once."""
    threads, rounds = args.threads, args.rounds
    shared = {"counter": 0, "inside": 0, "overlap": 0}
    errors = []

    def worker():
        try:
            for _ in range(rounds):
                if errors:
                    return
                lock = r.lock(key, timeout=5, sleep=0.005, blocking_timeout=60)
                if not args.no_lock:
                    check(lock.acquire(), "acquire gave up after 60s")
                try:
                    shared["inside"] += 1
                    if shared["inside"] > 1:
                        shared["overlap"] += 1
                    value = shared["counter"]
                    time.sleep(0.002)
                    shared["counter"] = value + 1
                    shared["inside"] -= 1
                finally:
                    if not args.no_lock:
                        lock.release()
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(f"{type(e).__name__}: {e}")

    workers = [threading.Thread(target=worker, name=f"worker-{i}") for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    check(all(not w.is_alive() for w in workers), "a worker did not finish within 120s")
    check(not errors, f"workers failed: {errors[:3]}")
    want = threads * rounds
    lost = want - shared["counter"]
    check(lost == 0 and shared["overlap"] == 0,
          f"lost {lost} of {want} updates; {shared['overlap']} entries overlapped another holder")
    trace.emit("contention", key=key, increments=want, counter=shared["counter"])


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
}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--addr", required=True, help="host:port of the Redis (or proxy) to lock on")
    p.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    p.add_argument("--prefix", default="redispy", help="key prefix")
    p.add_argument("--wait-ack", action="store_true", help="after each trace line, wait for a line on stdin")
    p.add_argument("--threads", type=int, default=6)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--key", help="the key to lock (default: a fresh one under --prefix)")
    p.add_argument("--seconds", type=float, default=2.0, help="how long the holds scenario runs")
    p.add_argument("--no-lock", action="store_true",
                   help="contention without the lock (a control: updates must be lost)")
    args = p.parse_args()

    host, _, port = args.addr.rpartition(":")
    r = redis.Redis(host=host, port=int(port), socket_timeout=10, socket_connect_timeout=5)
    trace = Trace(args.wait_ack)
    key = args.key or f"{args.prefix}:{args.scenario}:{uuid.uuid4().hex}"
    try:
        SCENARIOS[args.scenario](r, key, trace, args)
    except Exception as e:  # noqa: BLE001 - every failure ends the run the same way
        traceback.print_exc(file=sys.stderr)
        trace.emit("error", error=f"{type(e).__name__}: {e}", redis_py=redis.__version__)
        return 1
    trace.emit("done", redis_py=redis.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
