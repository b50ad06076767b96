"""python-redis-lock's Lock, unchanged, against one or two Redis addresses.

It takes the lock (SET NX EX) and releases it with a script that also
pushes a signal element onto a list (LPUSH) for waiters blocked in BLPOP.
A waiter blocks in acquire() through the second address while the lock is
held, and is woken by the release's signal; another waits with a timeout
of one second on a lock no one releases, and gives up. Prints one line
per step: what the library returned, or the error it raised, and the time
from the release to the waiter's grant. Run with the virtualenv that
./test.sh makes from requirements.txt:

    .venv/bin/python python_redis_lock.py --addr 127.0.0.1:6379 [--other 127.0.0.1:6380] --name lock:x
"""

import argparse
import threading
import time

import redis
import redis_lock


def connect(addr):
    host, port = addr.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port))


def step(what, fn):
    try:
        print(what, fn(), flush=True)
    except Exception as e:  # the proxy's refusal
        print(what, "error", type(e).__name__, e, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--other")
    ap.add_argument("--name", required=True)
    a = ap.parse_args()
    conn, conn2 = connect(a.addr), connect(a.other or a.addr)
    lock = redis_lock.Lock(conn, a.name, expire=10)
    step("acquire", lock.acquire)
    step("other", lambda: redis_lock.Lock(conn2, a.name, expire=10).acquire(blocking=False))

    # A waiter through the other address, blocking for up to 8 s: only the
    # release's signal wakes it before then.
    waiter = redis_lock.Lock(conn2, a.name, expire=10)
    got = {}

    def wait():
        got["ok"] = waiter.acquire(blocking=True, timeout=8)
        got["at"] = time.monotonic()

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    released = time.monotonic()
    step("release", lambda: lock.release() or "ok")
    t.join()
    print("waiter", got["ok"], flush=True)
    print("handoff", int((got["at"] - released) * 1000), "ms", flush=True)

    # A waiter with a timeout of one second, on a lock no one releases.
    late = redis_lock.Lock(conn, a.name, expire=10)
    started = time.monotonic()
    step("timeout", lambda: late.acquire(blocking=True, timeout=1))
    print("waited", int((time.monotonic() - started) * 1000), "ms", flush=True)
    step("waiter release", lambda: waiter.release() or "ok")


if __name__ == "__main__":
    main()
