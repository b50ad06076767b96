//! rslock's LockManager, unchanged, against one Redis address (a lone
//! Redis, or redlock-proxy in front of several masters).
//!
//! Runs one scenario and checks every result the library returns. After
//! each step that changes what the server holds it prints one JSON line on
//! stdout (the trace; rslock's tokens are 20 random bytes, so they are
//! printed hex-encoded) and, with --wait-ack, waits for a line on stdin, so
//! that a caller can check each master while the lock is in that state. The
//! last line is {"step": "done"} and the exit status 0; on a failed check
//! or an error the last line is {"step": "error", ...} and the exit status 1.
//!
//!     rslock_lock --addr 127.0.0.1:6379 --scenario lifecycle

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rslock::{Lock, LockError, LockManager};

struct Args {
    addr: String,
    scenario: String,
    prefix: String,
    wait_ack: bool,
    no_lock: bool,
    threads: u64,
    rounds: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        addr: String::new(),
        scenario: String::new(),
        prefix: "rslock".into(),
        wait_ack: false,
        no_lock: false,
        threads: 6,
        rounds: 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => a.addr = value()?,
            "--scenario" => a.scenario = value()?,
            "--prefix" => a.prefix = value()?,
            "--threads" => a.threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--rounds" => a.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--wait-ack" => a.wait_ack = true,
            "--no-lock" => a.no_lock = true,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.addr.is_empty() || a.scenario.is_empty() {
        return Err("--addr and --scenario are required".into());
    }
    Ok(a)
}

/// A value of a trace line.
enum V<'a> {
    S(&'a str),
    N(u64),
    B(bool),
}

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

struct Trace {
    wait_ack: bool,
}

impl Trace {
    /// emit prints one step and, with --wait-ack, waits until the caller
    /// has checked the masters.
    fn emit(&self, step: &str, fields: &[(&str, V)]) -> Result<(), String> {
        let mut line = String::from("{");
        for (k, v) in fields {
            let v = match v {
                V::S(s) => quote(s),
                V::N(n) => n.to_string(),
                V::B(b) => b.to_string(),
            };
            line.push_str(&format!("{}: {}, ", quote(k), v));
        }
        line.push_str(&format!("\"step\": {}}}\n", quote(step)));
        let mut out = std::io::stdout().lock();
        out.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
        if self.wait_ack && step != "done" && step != "error" {
            let mut ack = String::new();
            let n = std::io::stdin().lock().read_line(&mut ack).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the checker went away".into());
            }
        }
        Ok(())
    }

    /// step emits a step of the lock on key with hex-encoded tokens.
    fn step(&self, step: &str, key: &str, token: &[u8], extra: &[(&str, V)]) -> Result<(), String> {
        let token = hex(token);
        let mut fields = vec![("key", V::S(key)), ("token", V::S(&token)), ("hex", V::B(true))];
        for (k, v) in extra {
            fields.push((
                k,
                match v {
                    V::S(s) => V::S(s),
                    V::N(n) => V::N(*n),
                    V::B(b) => V::B(*b),
                },
            ));
        }
        self.emit(step, &fields)
    }
}

fn check(cond: bool, msg: impl Into<String>) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg.into())
    }
}

fn manager(addr: &str, retries: u32, delay_ms: u64) -> LockManager {
    let mut m = LockManager::new(vec![format!("redis://{addr}/")]);
    m.set_retry(retries, Duration::from_millis(delay_ms));
    m
}

/// stale is a lock on key with a token nobody holds, as another client
/// would have it.
fn stale(m: &LockManager, key: &str) -> Result<Lock, String> {
    Ok(Lock {
        resource: key.as_bytes().to_vec(),
        val: m.get_unique_lock_id().map_err(|e| e.to_string())?,
        validity_time: 0,
        lock_manager: m.clone(),
    })
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

async fn lifecycle(a: &Args, t: &Trace, key: &str) -> Result<(), String> {
    let m = manager(&a.addr, 1, 50);
    let lock = m.lock(key.as_bytes(), Duration::from_secs(10)).await.map_err(|e| format!("lock of a free resource: {e}"))?;
    let at = Instant::now();
    check(lock.validity_time > 9000 && lock.validity_time <= 10000, format!("validity {} ms; want just under 10000", lock.validity_time))?;
    t.step("acquire", key, &lock.val, &[("ttl_ms", V::N(10000))])?;
    check(matches!(m.is_freed(&lock).await, Ok(false)), "is_freed() of the holder's lock is not Ok(false)")?;

    let other = manager(&a.addr, 2, 50);
    match other.lock(key.as_bytes(), Duration::from_secs(10)).await {
        Err(LockError::Unavailable) => {}
        r => return Err(format!("lock of a held resource: {r:?}; want Unavailable")),
    }
    // The refused attempts' tokens are the library's own: the trace gives
    // none, and the check is that every master holds the holder's or nothing.
    let holder = hex(&lock.val);
    t.emit("refused", &[("key", V::S(key)), ("holder", V::S(&holder)), ("hex", V::B(true)), ("ttl_ms", V::N(10000)), ("age_ms", V::N(ms(at.elapsed())))])?;

    let theirs = stale(&other, key)?;
    match other.extend(&theirs, Duration::from_secs(30)).await {
        Err(LockError::Unavailable) => {}
        r => return Err(format!("extend with another token: {r:?}; want Unavailable")),
    }
    match other.is_freed(&theirs).await {
        Err(LockError::RedisKeyMismatch) => {}
        r => return Err(format!("is_freed() with another token: {r:?}; want RedisKeyMismatch")),
    }
    other.unlock(&theirs).await;
    t.step("not-owner", key, &lock.val, &[("other", V::S(&hex(&theirs.val))), ("ttl_ms", V::N(10000)), ("age_ms", V::N(ms(at.elapsed())))])?;

    let lock = m.extend(&lock, Duration::from_secs(20)).await.map_err(|e| format!("extend by the holder: {e}"))?;
    t.step("extend", key, &lock.val, &[("ttl_ms", V::N(20000))])?;

    m.unlock(&lock).await;
    t.step("release", key, &lock.val, &[])?;
    match m.is_freed(&lock).await {
        Err(LockError::RedisKeyNotFound) => {}
        r => return Err(format!("is_freed() after unlock: {r:?}; want RedisKeyNotFound")),
    }

    let guard = other.acquire(key.as_bytes(), Duration::from_secs(10)).await.map_err(|e| format!("acquire after unlock: {e}"))?;
    t.step("acquire", key, &guard.lock.val, &[("ttl_ms", V::N(10000))])?;
    let token = guard.lock.val.clone();
    guard.release().await;
    t.step("release", key, &token, &[])
}

async fn not_owned(a: &Args, t: &Trace, key: &str) -> Result<(), String> {
    let m = manager(&a.addr, 1, 50);
    let old = m.lock(key.as_bytes(), Duration::from_millis(500)).await.map_err(|e| format!("lock of a free resource: {e}"))?;
    t.step("acquire", key, &old.val, &[("ttl_ms", V::N(500))])?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !matches!(m.is_freed(&old).await, Err(LockError::RedisKeyNotFound)) {
        check(Instant::now() < deadline, "a 0.5s lock was still held after 5s")?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check(m.extend(&old, Duration::from_secs(10)).await.is_err(), "extend after expiry succeeded")?;
    t.step("expired", key, &old.val, &[])?;

    let next = manager(&a.addr, 1, 50);
    let new = next.lock(key.as_bytes(), Duration::from_secs(10)).await.map_err(|e| format!("lock after expiry: {e}"))?;
    t.step("acquire", key, &new.val, &[("ttl_ms", V::N(10000))])?;
    check(m.extend(&old, Duration::from_secs(30)).await.is_err(), "extend by the expired holder succeeded")?;
    m.unlock(&old).await;
    t.step("not-owner", key, &new.val, &[("other", V::S(&hex(&old.val))), ("ttl_ms", V::N(10000))])?;
    next.unlock(&new).await;
    t.step("release", key, &new.val, &[])
}

async fn handoff(a: &Args, t: &Trace, key: &str) -> Result<(), String> {
    let m = manager(&a.addr, 1, 50);
    let first = m.lock(key.as_bytes(), Duration::from_secs(10)).await.map_err(|e| format!("lock of a free resource: {e}"))?;
    t.step("acquire", key, &first.val, &[("ttl_ms", V::N(10000))])?;
    let waiter = manager(&a.addr, 3, 30);
    let wkey = key.to_string();
    let w = waiter.clone();
    let task = tokio::spawn(async move {
        let lock = w.acquire_no_guard(wkey.as_bytes(), Duration::from_secs(10)).await;
        (lock, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    check(!task.is_finished(), "the waiter did not wait while the lock was held")?;
    let released_at = Instant::now();
    m.unlock(&first).await;
    let (got, at) = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .map_err(|_| "the waiter did not get the lock within 10s of its release".to_string())?
        .map_err(|e| e.to_string())?;
    let got = got.map_err(|e| format!("the waiter: {e}"))?;
    check(at >= released_at, "the waiter got the lock before it was released")?;
    t.step("handoff", key, &got.val, &[("other", V::S(&hex(&first.val))), ("ttl_ms", V::N(10000))])?;
    waiter.unlock(&got).await;
    t.step("release", key, &got.val, &[])
}

/// contention: tasks increment a counter with a pause between read and
/// write, each inside LockManager::using (which extends the lock while the
/// routine runs and releases it after); no update may be lost.
async fn contention(a: &Args, t: &Trace, key: &str) -> Result<(), String> {
    let m = manager(&a.addr, 1, 10);
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let overlap = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..a.threads {
        let (m, counter, inside, overlap) = (m.clone(), counter.clone(), inside.clone(), overlap.clone());
        let (key, rounds, no_lock) = (key.to_string(), a.rounds, a.no_lock);
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let body = async || {
                    if inside.swap(true, Ordering::SeqCst) {
                        overlap.fetch_add(1, Ordering::SeqCst);
                    }
                    let v = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    counter.store(v + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                };
                if no_lock {
                    body().await;
                } else {
                    m.using(key.as_bytes(), Duration::from_secs(5), body).await.map_err(|e| e.to_string())?;
                }
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .map_err(|_| "a worker did not finish within 120s".to_string())?
            .map_err(|e| e.to_string())??;
    }
    let want = a.threads * a.rounds;
    let got = counter.load(Ordering::SeqCst);
    let overlap = overlap.load(Ordering::SeqCst);
    check(got == want && overlap == 0, format!("lost {} of {want} updates; {overlap} entries overlapped another holder", want - got))?;
    t.emit("contention", &[("key", V::S(key)), ("increments", V::N(want)), ("counter", V::N(got))])
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let t = Trace { wait_ack: args.wait_ack };
    let key = format!("{}:{}:{}", args.prefix, args.scenario, std::process::id());
    let result = match args.scenario.as_str() {
        "lifecycle" => lifecycle(&args, &t, &key).await,
        "not-owned" => not_owned(&args, &t, &key).await,
        "handoff" => handoff(&args, &t, &key).await,
        "contention" => contention(&args, &t, &key).await,
        s => Err(format!("unknown scenario '{s}'")),
    };
    let library = "rslock 0.10.0";
    if let Err(e) = result {
        let _ = t.emit("error", &[("error", V::S(&e)), ("library", V::S(library))]);
        std::process::exit(1);
    }
    let _ = t.emit("done", &[("library", V::S(library))]);
}
