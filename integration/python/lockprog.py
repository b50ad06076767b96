"""What the Python lock programs share: checks, the trace they print, the
contention and hand-off scenarios, and the command line.

A program runs one scenario against one address (a lone Redis, or
redlock-proxy in front of several masters) and checks every result its
library returns. After each step that changes what the server holds it
prints one JSON line on stdout (the trace) and, with --wait-ack, waits for a
line on stdin, so that a caller can check each master while the lock is in
that state. The last line is {"step": "done"} and the exit status 0; on a
failed check or an error from the server the last line is
{"step": "error", ...} and the exit status 1.
"""

import argparse
import json
import sys
import threading
import time
import traceback
import uuid


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


class Ages:
    """Milliseconds since a lock was given its TTL, for the trace's age_ms."""

    def __init__(self):
        self.start = time.monotonic()

    def __call__(self):
        return int((time.monotonic() - self.start) * 1000)


def contention(key, trace, args, run_locked):
    """Threads increment a shared counter with a pause between read and
    write, each increment inside run_locked(body) (which, with --no-lock,
    must call body without the lock); with the lock no update is lost and
    no two threads are ever inside at once."""
    threads, rounds = args.threads, args.rounds
    shared = {"counter": 0, "inside": 0, "overlap": 0}
    errors = []

    def body():
        shared["inside"] += 1
        if shared["inside"] > 1:
            shared["overlap"] += 1
        value = shared["counter"]
        time.sleep(0.002)
        shared["counter"] = value + 1
        shared["inside"] -= 1

    def worker():
        try:
            for _ in range(rounds):
                if errors:
                    return
                run_locked(body)
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


def handoff(first, release_first, wait):
    """While this thread holds a lock (its token first), a waiter thread
    blocks in wait(), which returns (token, release) once it holds it. After
    half a second this thread calls release_first(); the waiter must get the
    lock after that and within 10 s. Returns the waiter's token and a
    function that lets the waiter release and checks that it did."""
    state = {}
    may_release = threading.Event()

    def waiter():
        try:
            token, release = wait()
            state["at"] = time.monotonic()
            state["token"] = token
            may_release.wait(30)
            release()
            state["released"] = True
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            state["error"] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=waiter, name="waiter")
    t.start()

    def finish():
        may_release.set()
        t.join(30)
        check(not t.is_alive(), "the waiter did not finish")
        check("error" not in state, f"waiter: {state.get('error')}")
        check(state.get("released"), "the waiter did not release")

    try:
        time.sleep(0.5)
        check("at" not in state and "error" not in state, f"the waiter did not block while the lock was held: {state}")
        released_at = time.monotonic()
        release_first()
        deadline = time.monotonic() + 10
        while "at" not in state and "error" not in state:
            check(time.monotonic() < deadline, "the waiter did not get the lock within 10s of its release")
            time.sleep(0.01)
        check("error" not in state, f"waiter: {state.get('error')}")
        check(state["at"] >= released_at, "the waiter got the lock before it was released")
        check(state["token"] != first, "the waiter holds the first holder's token")
    except BaseException:
        may_release.set()
        t.join(30)
        raise
    return state["token"], finish


def main(doc, scenarios, connect, version):
    """Parses the command line, runs the scenario named there with
    connect(host, port) as its client, and prints the last trace line
    (version() names the library in it)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--addr", required=True, help="host:port of the Redis (or proxy) to lock on")
    p.add_argument("--scenario", required=True, choices=sorted(scenarios))
    p.add_argument("--prefix", default="lock", help="key prefix")
    p.add_argument("--wait-ack", action="store_true", help="after each trace line, wait for a line on stdin")
    p.add_argument("--threads", type=int, default=6)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--key", help="the key to lock (default: a fresh one under --prefix)")
    p.add_argument("--seconds", type=float, default=2.0, help="how long the holds scenario runs")
    p.add_argument("--no-lock", action="store_true",
                   help="contention without the lock (a control: updates must be lost)")
    args = p.parse_args()

    host, _, port = args.addr.rpartition(":")
    trace = Trace(args.wait_ack)
    key = args.key or f"{args.prefix}:{args.scenario}:{uuid.uuid4().hex}"
    try:
        scenarios[args.scenario](connect(host, int(port)), key, trace, args)
    except Exception as e:  # noqa: BLE001 - every failure ends the run the same way
        traceback.print_exc(file=sys.stderr)
        trace.emit("error", error=f"{type(e).__name__}: {e}", library=version())
        return 1
    trace.emit("done", library=version())
    return 0
