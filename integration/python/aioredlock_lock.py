"""aioredlock's Aioredlock, unchanged, against one Redis address.

Its one instance is the address given (a lone Redis, or redlock-proxy in
front of several). The trace and command line are lockprog.py's; the
trace is printed from a thread so that the event loop (and aioredlock's
watchdog) goes on while the caller checks the masters. Run with the
virtualenv that ./test.sh makes from requirements.txt:

    .venv/bin/python aioredlock_lock.py --addr 127.0.0.1:6379 --scenario lifecycle
"""

import asyncio
import sys
import time
import uuid
from importlib.metadata import version

from aioredlock import Aioredlock, Lock, LockError

from lockprog import Ages, CheckFailed, check, main


class Scenario:
    def __init__(self, addr, key, trace, args):
        self.addr, self.key, self.trace, self.args = addr, key, trace, args
        self.managers = []

    def manager(self, **kw):
        m = Aioredlock([self.addr], **kw)
        self.managers.append(m)
        return m

    async def emit(self, step, **fields):
        await asyncio.to_thread(self.trace.emit, step, key=self.key, **fields)

    async def raises(self, coro, what):
        try:
            await coro
        except LockError as e:
            return e
        raise CheckFailed(f"{what}: returned normally; want LockError")

    async def close(self):
        for m in self.managers:
            await m.destroy()


async def lifecycle(s):
    """lock, refused, is_locked, extend, the TTL query, release by another
    and by the holder, a second release."""
    m = s.manager(retry_count=2, retry_delay_min=0.05, retry_delay_max=0.1)
    lock = await m.lock(s.key, lock_timeout=10)
    age = Ages()
    await s.emit("acquire", token=lock.id, ttl_ms=10000)
    check(await m.is_locked(s.key) and await m.is_locked(lock), "is_locked() is False while held")

    other = s.manager(retry_count=2, retry_delay_min=0.05, retry_delay_max=0.1)
    other_id = str(uuid.uuid4())
    await s.raises(other.lock(s.key, lock_timeout=10, lock_identifier=other_id), "lock of a held lock")
    await s.emit("refused", token=other_id, holder=lock.id, ttl_ms=10000, age_ms=age())

    await m.extend(lock, lock_timeout=20)
    await s.emit("extend", token=lock.id, ttl_ms=20000)
    ttl = await m.redis.get_lock_ttl(s.key, lock.id)
    check(18 <= ttl <= 20, f"the lock's TTL after extend is {ttl}; want about 20 (seconds)")
    await s.raises(m.redis.get_lock_ttl(s.key, other_id), "the TTL query of another identifier")

    await s.raises(other.unlock(Lock(other, s.key, other_id, 10, valid=True)), "unlock by another identifier")
    await s.emit("not-owner", token=lock.id, other=other_id, ttl_ms=20000)

    await m.unlock(lock)
    await s.emit("release", token=lock.id)
    check(not await m.is_locked(s.key), "is_locked() is True after unlock")
    await m.unlock(lock)  # already gone: aioredlock takes it as done


async def not_owned(s):
    """After expiry the old holder's extend takes the lock again while it
    is free (aioredlock's extend is its acquire with the same identifier);
    once another client holds it, neither its extend nor its unlock touches
    it."""
    m = s.manager(retry_count=1)
    lock = await m.lock(s.key, lock_timeout=0.5)
    await s.emit("acquire", token=lock.id, ttl_ms=500)
    deadline = time.monotonic() + 5
    while await m.is_locked(s.key):
        check(time.monotonic() < deadline, "a 0.5s lock was still held after 5s")
        await asyncio.sleep(0.05)
    await s.emit("expired", token=lock.id)
    await m.extend(lock, lock_timeout=10)
    await s.emit("reacquire", token=lock.id, ttl_ms=10000)
    await m.unlock(lock)
    await s.emit("release", token=lock.id)

    other = s.manager(retry_count=1)
    next_lock = await other.lock(s.key, lock_timeout=10)
    await s.emit("acquire", token=next_lock.id, ttl_ms=10000)
    stale = Lock(m, s.key, lock.id, 10, valid=True)  # a copy of the old holder's lock, still taken as valid
    await s.raises(m.extend(stale, lock_timeout=30), "extend by a client whose lock another holds")
    await s.raises(m.unlock(stale), "unlock by a client whose lock another holds")
    await s.emit("not-owner", token=next_lock.id, other=lock.id, ttl_ms=10000)
    await other.unlock(next_lock)
    await s.emit("release", token=next_lock.id)


async def watchdog(s):
    """A lock taken without lock_timeout is extended by aioredlock's
    watchdog every 0.6 of internal_lock_timeout (1 s here) until unlock."""
    m = s.manager(internal_lock_timeout=1.0)
    lock = await m.lock(s.key)
    await s.emit("acquire", token=lock.id, ttl_ms=1000)
    await asyncio.sleep(2.5)
    check(await m.is_locked(s.key), "the lock expired while its watchdog ran")
    await s.emit("extend", token=lock.id, ttl_ms=1000)
    await m.unlock(lock)
    await s.emit("release", token=lock.id)


async def handoff(s):
    """A task retries lock() while another holds the lock, and gets it once
    that one releases."""
    m = s.manager(retry_count=1)
    lock = await m.lock(s.key, lock_timeout=10)
    await s.emit("acquire", token=lock.id, ttl_ms=10000)
    waiter = s.manager(retry_count=1000, retry_delay_min=0.01, retry_delay_max=0.03)
    task = asyncio.ensure_future(waiter.lock(s.key, lock_timeout=10))
    await asyncio.sleep(0.5)
    check(not task.done(), "the waiter did not wait while the lock was held")
    released_at = time.monotonic()
    await m.unlock(lock)
    got = await asyncio.wait_for(task, 10)
    check(time.monotonic() >= released_at, "the waiter got the lock before it was released")
    await s.emit("handoff", token=got.id, other=lock.id, ttl_ms=10000)
    await waiter.unlock(got)
    await s.emit("release", token=got.id)


async def contention(s):
    """Tasks increment a shared counter with a pause between read and
    write, each inside `async with await lock(...)`: no update is lost and no
    two tasks are ever inside at once."""
    args = s.args
    m = s.manager(retry_count=10000, retry_delay_min=0.002, retry_delay_max=0.01)
    shared = {"counter": 0, "inside": 0, "overlap": 0}

    async def body():
        shared["inside"] += 1
        if shared["inside"] > 1:
            shared["overlap"] += 1
        value = shared["counter"]
        await asyncio.sleep(0.002)
        shared["counter"] = value + 1
        shared["inside"] -= 1

    async def worker():
        for _ in range(args.rounds):
            if args.no_lock:
                await body()
                continue
            async with await m.lock(s.key, lock_timeout=5):
                await body()

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(args.threads))), 120)
    want = args.threads * args.rounds
    lost = want - shared["counter"]
    check(lost == 0 and shared["overlap"] == 0,
          f"lost {lost} of {want} updates; {shared['overlap']} entries overlapped another holder")
    await s.emit("contention", increments=want, counter=shared["counter"])


def run(fn):
    def scenario(addr, key, trace, args):
        async def go():
            s = Scenario(addr, key, trace, args)
            try:
                await fn(s)
            finally:
                await s.close()
        asyncio.run(go())
    return scenario


SCENARIOS = {
    "lifecycle": run(lifecycle),
    "not-owned": run(not_owned),
    "watchdog": run(watchdog),
    "handoff": run(handoff),
    "contention": run(contention),
}


def connect(host, port):
    return {"host": host, "port": port}


if __name__ == "__main__":
    sys.exit(main(__doc__, SCENARIOS, connect,
                  lambda: f"aioredlock {version('aioredlock')}, aioredis {version('aioredis')}"))
