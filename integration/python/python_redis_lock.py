"""python-redis-lock's Lock, unchanged, against one Redis address.

It takes the lock (SET NX EX) and releases it with a script that also
pushes a signal element onto a list (LPUSH) for waiters blocked in BLPOP.
Prints one line per step: what the library returned, or the error it
raised. Run with the virtualenv that ./test.sh makes from
requirements.txt:

    .venv/bin/python python_redis_lock.py --addr 127.0.0.1:6379 --name lock:x
"""

import argparse

import redis
import redis_lock


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--name", required=True)
    a = ap.parse_args()
    host, port = a.addr.rsplit(":", 1)
    conn = redis.Redis(host=host, port=int(port))
    lock = redis_lock.Lock(conn, a.name, expire=10)
    print("acquire", lock.acquire(blocking=False), flush=True)
    other = redis_lock.Lock(conn, a.name, expire=10)
    print("other", other.acquire(blocking=False), flush=True)
    try:
        lock.release()
        print("release ok", flush=True)
    except Exception as e:  # the proxy's refusal
        print("release error", type(e).__name__, e, flush=True)


if __name__ == "__main__":
    main()
