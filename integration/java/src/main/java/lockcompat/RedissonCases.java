package lockcompat;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson (useSingleServer): RLock (lock and unlock, reentrancy, a waiter
 * woken by the release's message, the watchdog's renewal, forceUnlock,
 * isLocked, remainTimeToLive), RReadWriteLock, RFencedLock's tokens across
 * lock addresses, RSemaphore and RPermitExpirableSemaphore. An RLock is a
 * hash whose one field, "client id:thread id", counts its entries.
 */
final class RedissonCases {
    static Map<String, Main.Case> cases() {
        return Main.ordered(
                "RLock: lock, isLocked, remainTimeToLive, refusal, unlock", (Main.Case) RedissonCases::lifecycle,
                "RLock: reentrancy", (Main.Case) RedissonCases::reentrancy,
                "RLock: tryLock(wait, lease) waiter woken by the release", (Main.Case) RedissonCases::waiter,
                "RLock: watchdog renews past lockWatchdogTimeout", (Main.Case) RedissonCases::watchdog,
                "RLock: watchdog renews every lock of a client at once", (Main.Case) RedissonCases::watchdogMany,
                "RLock: forceUnlock", (Main.Case) RedissonCases::forceUnlock,
                "RReadWriteLock: readers share, a writer excludes", (Main.Case) RedissonCases::readWrite,
                "RReadWriteLock: two readers at once through two proxies", (Main.Case) RedissonCases::twoReaders,
                "RReadWriteLock: a writer waits for the last reader's unlock", (Main.Case) RedissonCases::writerAfterReaders,
                "RReadWriteLock: a reader refused while a writer holds", (Main.Case) RedissonCases::readerRefused,
                "RReadWriteLock: the writer's own read", (Main.Case) RedissonCases::writersRead,
                "RReadWriteLock: reentrant reads and writes", (Main.Case) RedissonCases::rwReentrancy,
                "RReadWriteLock: watchdog renews read and write locks", (Main.Case) RedissonCases::rwWatchdog,
                "RReadWriteLock: a dead reader's lease expires", (Main.Case) RedissonCases::deadReader,
                "RFencedLock: tokens strictly increase across grants and addresses", (Main.Case) RedissonCases::fenced,
                "RSemaphore: at most its permits", (Main.Case) RedissonCases::semaphore,
                "RPermitExpirableSemaphore: leases and expiry", (Main.Case) RedissonCases::expirable);
    }

    /** Clients, each with its own connections, closed together. */
    static final class Clients implements AutoCloseable {
        private final List<RedissonClient> opened = new ArrayList<>();

        RedissonClient open(String addr) {
            return open(addr, 0);
        }

        /** A client of addr; watchdogMs, when > 0, is its lockWatchdogTimeout. */
        RedissonClient open(String addr, long watchdogMs) {
            Config cfg = new Config();
            cfg.setThreads(2);
            cfg.setNettyThreads(4);
            if (watchdogMs > 0) {
                cfg.setLockWatchdogTimeout(watchdogMs);
            }
            cfg.useSingleServer().setAddress("redis://" + addr)
                    .setConnectionMinimumIdleSize(1).setConnectionPoolSize(4)
                    .setSubscriptionConnectionMinimumIdleSize(1).setSubscriptionConnectionPoolSize(4);
            RedissonClient c = Redisson.create(cfg);
            opened.add(c);
            return c;
        }

        @Override
        public void close() {
            for (RedissonClient c : opened) {
                c.shutdown(0, 2, TimeUnit.SECONDS);
            }
        }
    }

    /** Two clients, on the first two lock addresses, and their RLocks of one new name. */
    record Two(RedissonClient a, RedissonClient b, String name, RLock la, RLock lb) {
        static Two open(Clients cs, Main.Env env, long watchdogMs) {
            RedissonClient a = cs.open(env.addr(), watchdogMs);
            RedissonClient b = cs.open(env.addr(1));
            String name = Main.key("redisson");
            return new Two(a, b, name, a.getLock(name), b.getLock(name));
        }
    }

    /** The hash field an RLock of client c held by the current thread counts in. */
    static String owner(RedissonClient c) {
        return owner(c, Thread.currentThread().getId());
    }

    static String owner(RedissonClient c, long threadId) {
        return c.getId() + ":" + threadId;
    }

    static void lifecycle(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            Two t = Two.open(cs, env, 0);
            t.la().lock(10, TimeUnit.SECONDS);
            m.hashHeld("lock", t.name(), Map.of(owner(t.a()), "1"), 8000, 10000);
            Main.check(t.la().isLocked() && t.la().isHeldByCurrentThread(), "isLocked()/isHeldByCurrentThread() false after lock()");
            long ttl = t.la().remainTimeToLive();
            Main.check(ttl > 8000 && ttl <= 10000, "remainTimeToLive() = " + ttl);
            Main.check(!t.lb().tryLock(), "another client got a held lock");
            Main.check(t.lb().isLocked() && !t.lb().isHeldByCurrentThread(), "another client's view of the held lock is wrong");
            m.hashHeld("refused", t.name(), Map.of(owner(t.a()), "1"), 7000, 10000);
            t.la().unlock();
            m.gone("unlock", t.name());
            Main.check(!t.la().isLocked(), "isLocked() after unlock()");
            Main.check(t.la().remainTimeToLive() == -2, "remainTimeToLive() of a free lock = " + t.la().remainTimeToLive());
            Main.check(t.lb().tryLock(0, 10, TimeUnit.SECONDS), "tryLock() after the unlock returned false");
            m.hashHeld("lock after unlock", t.name(), Map.of(owner(t.b()), "1"), 8000, 10000);
            t.lb().unlock();
            m.gone("unlock", t.name());
        }
    }

    static void reentrancy(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            Two t = Two.open(cs, env, 0);
            t.la().lock(10, TimeUnit.SECONDS);
            t.la().lock(10, TimeUnit.SECONDS);
            m.hashHeld("lock twice", t.name(), Map.of(owner(t.a()), "2"), 8000, 10000);
            Main.check(t.la().getHoldCount() == 2, "getHoldCount() = " + t.la().getHoldCount());
            t.la().unlock();
            m.hashHeld("first unlock", t.name(), Map.of(owner(t.a()), "1"), 7000, 10000);
            Main.check(t.la().isLocked(), "the lock is free after the first of two unlocks");
            Main.check(!t.lb().tryLock(), "another client got the lock after the first of two unlocks");
            t.la().unlock();
            m.gone("last unlock", t.name());
            Main.check(t.lb().tryLock(0, 10, TimeUnit.SECONDS), "tryLock() after the last unlock returned false");
            t.lb().unlock();
            m.gone("unlock", t.name());
        }
    }

    /**
     * A waiter in tryLock(8 s, 10 s) while the lock has 10 s to live: only
     * the release's message can wake it before then. The hand-off time is
     * printed.
     */
    static void waiter(Main.Env env) throws Exception {
        Masters m = env.masters();
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try (Clients cs = new Clients()) {
            Two t = Two.open(cs, env, 0);
            t.la().lock(10, TimeUnit.SECONDS);
            CompletableFuture<long[]> got = CompletableFuture.supplyAsync(() -> {
                try {
                    boolean ok = t.lb().tryLock(8, 10, TimeUnit.SECONDS);
                    return new long[] {ok ? System.nanoTime() : -1, Thread.currentThread().getId()};
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            }, pool);
            Main.sleep(500);
            Main.check(!got.isDone(), "the waiter returned while the lock was held");
            long released = System.nanoTime();
            t.la().unlock();
            long[] r = got.get(10, TimeUnit.SECONDS);
            Main.check(r[0] > 0, "the waiter gave up");
            long handoff = (r[0] - released) / 1_000_000;
            Main.log("hand-off " + handoff + " ms");
            Main.check(handoff < 4000, "the waiter got the lock " + handoff + " ms after the release: it was not woken");
            m.hashHeld("waiter holds", t.name(), Map.of(owner(t.b(), r[1]), "1"), 7000, 10000);
            t.lb().unlockAsync(r[1]).toCompletableFuture().get(10, TimeUnit.SECONDS);
            m.gone("unlock", t.name());
        } finally {
            pool.shutdownNow();
        }
    }

    /**
     * lock() without a lease, lockWatchdogTimeout 2 s: the watchdog renews
     * it every 2/3 s; held 5 s, another client refused throughout, and no
     * master's PTTL above 2 s.
     */
    static void watchdog(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            Two t = Two.open(cs, env, 2000);
            t.la().lock();
            long end = System.nanoTime() + 5_000_000_000L;
            while (System.nanoTime() < end) {
                m.hashHeld("renewed", t.name(), Map.of(owner(t.a()), "1"), 0, 2000);
                Main.check(!t.lb().tryLock(), "another client got a lock the watchdog renews");
                Main.sleep(400);
            }
            t.la().unlock();
            m.gone("unlock", t.name());
        }
    }

    /**
     * Three locks of one client without a lease, lockWatchdogTimeout 2 s:
     * the watchdog renews them together, in one call of several keys, each
     * with its owner; held 5 s, another client refused each throughout.
     */
    static void watchdogMany(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            RedissonClient a = cs.open(env.addr(), 2000);
            RedissonClient b = cs.open(env.addr(1));
            String base = Main.key("redisson");
            List<String> names = List.of("{" + base + "}:1", "{" + base + "}:2", "{" + base + "}:3");
            for (String n : names) {
                a.getLock(n).lock();
            }
            long end = System.nanoTime() + 5_000_000_000L;
            while (System.nanoTime() < end) {
                for (String n : names) {
                    m.hashHeld("renewed " + n, n, Map.of(owner(a), "1"), 0, 2000);
                    Main.check(!b.getLock(n).tryLock(), "another client got " + n + ", which the watchdog renews");
                }
                Main.sleep(400);
            }
            for (String n : names) {
                a.getLock(n).unlock();
                m.gone("unlock", n);
            }
        }
    }

    static void forceUnlock(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            Two t = Two.open(cs, env, 0);
            t.la().lock(10, TimeUnit.SECONDS);
            m.hashHeld("lock", t.name(), Map.of(owner(t.a()), "1"), 8000, 10000);
            Main.check(t.lb().forceUnlock(), "forceUnlock() of a held lock returned false");
            m.gone("forceUnlock", t.name());
            Main.check(!t.la().isLocked(), "isLocked() after forceUnlock()");
            Main.check(!t.lb().forceUnlock(), "forceUnlock() of a free lock returned true");
            Main.check(t.lb().tryLock(0, 10, TimeUnit.SECONDS), "tryLock() after forceUnlock() returned false");
            m.hashHeld("lock after forceUnlock", t.name(), Map.of(owner(t.b()), "1"), 8000, 10000);
            t.lb().unlock();
            m.gone("unlock", t.name());
        }
    }

    static void readWrite(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            RedissonClient a = cs.open(env.addr());
            RedissonClient b = cs.open(env.addr(1));
            RedissonClient c = cs.open(env.addr());
            String name = Main.key("redisson");
            RReadWriteLock ra = a.getReadWriteLock(name);
            RReadWriteLock rb = b.getReadWriteLock(name);
            RReadWriteLock rc = c.getReadWriteLock(name);
            Main.check(ra.readLock().tryLock(0, 10, TimeUnit.SECONDS), "a read lock of a free lock was refused");
            Main.check(rb.readLock().tryLock(0, 10, TimeUnit.SECONDS), "a second reader was refused");
            Masters.eventually("two readers", () -> {
                List<String> modes = m.each(j -> j.hget(name, "mode") + " " + j.hlen(name));
                long n = modes.stream().filter("read 3"::equals).count();
                return n >= m.majority() ? null : "mode and fields (want read, 3): " + modes;
            });
            Main.check(!rc.writeLock().tryLock(0, 10, TimeUnit.SECONDS), "a writer got a read-locked lock");
            ra.readLock().unlock();
            Main.check(!rc.writeLock().tryLock(0, 10, TimeUnit.SECONDS), "a writer got the lock beside a reader");
            rb.readLock().unlock();
            m.gone("readers released", name);
            Main.check(rc.writeLock().tryLock(0, 10, TimeUnit.SECONDS), "the writer was refused a free lock");
            m.hashHeld("writer", name, Map.of("mode", "write", owner(c) + ":write", "1"), 8000, 10000);
            Main.check(!ra.readLock().tryLock(0, 10, TimeUnit.SECONDS), "a reader got a write-locked lock");
            Main.check(!rb.writeLock().tryLock(0, 10, TimeUnit.SECONDS), "a second writer got a write-locked lock");
            rc.writeLock().unlock();
            m.gone("writer released", name);
        }
    }

    /** The lease key of the i-th read hold of client c's current thread on lock name. */
    static String lease(String name, RedissonClient c, int i) {
        return "{" + name + "}:" + owner(c) + ":rwlock_timeout:" + i;
    }

    /** Checks that a majority of masters hold name in mode with exactly the holders' counts. */
    static void rwHeld(Masters m, String step, String name, String mode, Map<String, String> holders, long lo, long hi) {
        Map<String, String> fields = new java.util.HashMap<>(holders);
        fields.put("mode", mode);
        m.hashHeld(step, name, fields, lo, hi);
    }

    /** Two readers through the two lock addresses, each with its lease, unlocked one by one. */
    static void twoReaders(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            RedissonClient a = cs.open(env.addr());
            RedissonClient b = cs.open(env.addr(1));
            String name = Main.key("redisson");
            Main.check(a.getReadWriteLock(name).readLock().tryLock(0, 10, TimeUnit.SECONDS), "the first reader was refused");
            Main.check(b.getReadWriteLock(name).readLock().tryLock(0, 20, TimeUnit.SECONDS), "the second reader, through the other address, was refused");
            rwHeld(m, "two readers", name, "read", Map.of(owner(a), "1", owner(b), "1"), 18000, 20000);
            m.anyHeld("first reader's lease", lease(name, a, 1), 8000, 10000);
            m.anyHeld("second reader's lease", lease(name, b, 1), 18000, 20000);
            b.getReadWriteLock(name).readLock().unlock();
            m.gone("second reader's lease after its unlock", lease(name, b, 1));
            rwHeld(m, "first reader left", name, "read", Map.of(owner(a), "1"), 7000, 10000);
            a.getReadWriteLock(name).readLock().unlock();
            m.gone("last reader's unlock", name);
            m.gone("first reader's lease after its unlock", lease(name, a, 1));
        }
    }

    /**
     * A writer refused while a reader holds, then waiting in tryLock(8 s,
     * 10 s) through the other address while the reader's lease has 10 s
     * left: the last reader's unlock, and its message, let it in well
     * before the lease would have run out.
     */
    static void writerAfterReaders(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            RedissonClient a = cs.open(env.addr());
            RedissonClient b = cs.open(env.addr(1));
            String name = Main.key("redisson");
            RReadWriteLock ra = a.getReadWriteLock(name);
            Main.check(ra.readLock().tryLock(0, 10, TimeUnit.SECONDS), "a reader was refused a free lock");
            rwHeld(m, "reader", name, "read", Map.of(owner(a), "1"), 8000, 10000);
            Main.check(!b.getReadWriteLock(name).writeLock().tryLock(0, 10, TimeUnit.SECONDS), "a writer got a read-locked lock");
            rwHeld(m, "writer refused", name, "read", Map.of(owner(a), "1"), 7000, 10000);
            ExecutorService pool = Executors.newSingleThreadExecutor();
            try {
                long[] tid = new long[1];
                CompletableFuture<Long> waited = CompletableFuture.supplyAsync(() -> {
                    tid[0] = Thread.currentThread().getId();
                    long t0 = System.nanoTime();
                    try {
                        boolean got = b.getReadWriteLock(name).writeLock().tryLock(8, 10, TimeUnit.SECONDS);
                        return got ? (System.nanoTime() - t0) / 1_000_000 : -1L;
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        return -1L;
                    }
                }, pool);
                Main.sleep(500);
                ra.readLock().unlock();
                long ms = waited.get(9, TimeUnit.SECONDS);
                Main.check(ms >= 0, "the waiting writer was refused after the last reader's unlock");
                Main.check(ms < 5000, "the writer got the lock after " + ms + " ms: not woken by the reader's unlock");
                rwHeld(m, "writer after the reader", name, "write", Map.of(owner(b, tid[0]) + ":write", "1"), 7000, 10000);
                pool.submit(() -> b.getReadWriteLock(name).writeLock().unlock()).get();
                m.gone("writer's unlock", name);
            } finally {
                pool.shutdownNow();
            }
        }
    }

    /** A writer holds: readers of other clients (either address) and another writer are refused. */
    static void readerRefused(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            RedissonClient a = cs.open(env.addr());
            RedissonClient b = cs.open(env.addr(1));
            RedissonClient c = cs.open(env.addr());
            String name = Main.key("redisson");
            RReadWriteLock wa = a.getReadWriteLock(name);
            Main.check(wa.writeLock().tryLock(0, 10, TimeUnit.SECONDS), "a writer was refused a free lock");
            rwHeld(m, "writer", name, "write", Map.of(owner(a) + ":write", "1"), 8000, 10000);
            Main.check(!b.getReadWriteLock(name).readLock().tryLock(0, 10, TimeUnit.SECONDS), "a reader got a write-locked lock");
            Main.check(!c.getReadWriteLock(name).readLock().tryLock(0, 10, TimeUnit.SECONDS), "a reader through the writer's address got its lock");
            Main.check(!b.getReadWriteLock(name).writeLock().tryLock(0, 10, TimeUnit.SECONDS), "a second writer got a write-locked lock");
            rwHeld(m, "readers refused", name, "write", Map.of(owner(a) + ":write", "1"), 7000, 10000);
            m.gone("no lease of a refused reader", lease(name, b, 1));
            wa.writeLock().unlock();
            m.gone("writer's unlock", name);
            Main.check(b.getReadWriteLock(name).readLock().tryLock(0, 10, TimeUnit.SECONDS), "a reader was refused after the writer's unlock");
            rwHeld(m, "reader after the writer", name, "read", Map.of(owner(b), "1"), 8000, 10000);
            b.getReadWriteLock(name).readLock().unlock();
            m.gone("reader's unlock", name);
        }
    }

    /**
     * The writer takes a read lock too (as on one Redis, the holder of the
     * write lock may read); its write unlock leaves its read, which still
     * keeps other writers out.
     */
    static void writersRead(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            RedissonClient a = cs.open(env.addr());
            RedissonClient b = cs.open(env.addr(1));
            String name = Main.key("redisson");
            RReadWriteLock rw = a.getReadWriteLock(name);
            Main.check(rw.writeLock().tryLock(0, 10, TimeUnit.SECONDS), "a writer was refused a free lock");
            Main.check(rw.readLock().tryLock(0, 10, TimeUnit.SECONDS), "the writer was refused its own read");
            rwHeld(m, "write and read", name, "write", Map.of(owner(a) + ":write", "1", owner(a), "1"), 8000, 10000);
            m.anyHeld("the writer's read lease", lease(name, a, 1), 8000, 10000);
            Main.check(!b.getReadWriteLock(name).readLock().tryLock(0, 10, TimeUnit.SECONDS), "another reader got a write-locked lock");
            rw.writeLock().unlock();
            rwHeld(m, "write unlocked, read left", name, "read", Map.of(owner(a), "1"), 7000, 10000);
            Main.check(!b.getReadWriteLock(name).writeLock().tryLock(0, 10, TimeUnit.SECONDS), "another writer got a read-locked lock");
            rw.readLock().unlock();
            m.gone("read unlock", name);
        }
    }

    /** Reads and writes entered twice: held until the last unlock, each read hold with its lease. */
    static void rwReentrancy(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            RedissonClient a = cs.open(env.addr());
            RedissonClient b = cs.open(env.addr(1));
            String name = Main.key("redisson");
            RReadWriteLock rw = a.getReadWriteLock(name);
            rw.readLock().lock(10, TimeUnit.SECONDS);
            rw.readLock().lock(20, TimeUnit.SECONDS);
            rwHeld(m, "read twice", name, "read", Map.of(owner(a), "2"), 18000, 20000);
            m.anyHeld("first read lease", lease(name, a, 1), 8000, 10000);
            m.anyHeld("second read lease", lease(name, a, 2), 18000, 20000);
            rw.readLock().unlock();
            m.gone("second read lease after an unlock", lease(name, a, 2));
            rwHeld(m, "one read unlock", name, "read", Map.of(owner(a), "1"), 7000, 10000);
            Main.check(!b.getReadWriteLock(name).writeLock().tryLock(0, 10, TimeUnit.SECONDS), "a writer got the lock after the first of two read unlocks");
            rw.readLock().unlock();
            m.gone("last read unlock", name);
            rw.writeLock().lock(10, TimeUnit.SECONDS);
            rw.writeLock().lock(10, TimeUnit.SECONDS);
            // A write lock entered again lives its lease longer.
            rwHeld(m, "write twice", name, "write", Map.of(owner(a) + ":write", "2"), 18000, 20000);
            rw.writeLock().unlock();
            // The unlock of one of two holds re-arms the lock for lockWatchdogTimeout (30 s).
            rwHeld(m, "one write unlock", name, "write", Map.of(owner(a) + ":write", "1"), 8000, 30000);
            Main.check(!b.getReadWriteLock(name).readLock().tryLock(0, 10, TimeUnit.SECONDS), "a reader got the lock after the first of two write unlocks");
            rw.writeLock().unlock();
            m.gone("last write unlock", name);
        }
    }

    /**
     * lockWatchdogTimeout 2 s: a read lock and then a write lock taken
     * without a lease are renewed for 5 s while another client is refused
     * throughout, and freed by their unlock.
     */
    static void rwWatchdog(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            RedissonClient a = cs.open(env.addr(), 2000);
            RedissonClient b = cs.open(env.addr(1));
            String name = Main.key("redisson");
            RReadWriteLock rw = a.getReadWriteLock(name);
            rw.readLock().lock();
            long end = System.nanoTime() + 5_000_000_000L;
            while (System.nanoTime() < end) {
                rwHeld(m, "read renewed", name, "read", Map.of(owner(a), "1"), 0, 2000);
                m.anyHeld("read lease renewed", lease(name, a, 1), 0, 2000);
                Main.check(!b.getReadWriteLock(name).writeLock().tryLock(), "a writer got a read lock the watchdog renews");
                Main.sleep(400);
            }
            rw.readLock().unlock();
            m.gone("read unlock", name);
            rw.writeLock().lock();
            end = System.nanoTime() + 5_000_000_000L;
            while (System.nanoTime() < end) {
                rwHeld(m, "write renewed", name, "write", Map.of(owner(a) + ":write", "1"), 0, 2000);
                Main.check(!b.getReadWriteLock(name).readLock().tryLock(), "a reader got a write lock the watchdog renews");
                Main.sleep(400);
            }
            rw.writeLock().unlock();
            m.gone("write unlock", name);
        }
    }

    /**
     * A reader with a 2 s lease whose client goes away without unlocking:
     * a writer is refused until the lease runs out, then gets the lock.
     */
    static void deadReader(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            RedissonClient b = cs.open(env.addr(1));
            String name = Main.key("redisson");
            Clients dying = new Clients();
            RedissonClient a = dying.open(env.addr());
            Main.check(a.getReadWriteLock(name).readLock().tryLock(0, 2, TimeUnit.SECONDS), "a reader was refused a free lock");
            rwHeld(m, "reader", name, "read", Map.of(owner(a), "1"), 1000, 2000);
            dying.close(); // the reader dies holding its lock
            Main.check(!b.getReadWriteLock(name).writeLock().tryLock(0, 10, TimeUnit.SECONDS), "a writer got the lock beside a live read lease");
            m.gone("the dead reader's lease", name);
            Main.check(b.getReadWriteLock(name).writeLock().tryLock(0, 10, TimeUnit.SECONDS), "a writer was refused after the dead reader's lease ran out");
            rwHeld(m, "writer", name, "write", Map.of(owner(b) + ":write", "1"), 8000, 10000);
            b.getReadWriteLock(name).writeLock().unlock();
            m.gone("writer's unlock", name);
        }
    }

    /**
     * Six grants, alternating between two clients on two lock addresses
     * (two proxies over the same masters): each token is larger than every
     * earlier one, and a refused attempt gets none; then a grant by lock(),
     * whose token getToken() reads.
     */
    static void fenced(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            RedissonClient[] clients = {cs.open(env.addr()), cs.open(env.addr(1))};
            String name = Main.key("redisson");
            long prev = Long.MIN_VALUE;
            for (int i = 0; i < 6; i++) {
                RedissonClient c = clients[i % 2];
                RFencedLock f = c.getFencedLock(name);
                Long token = f.tryLockAndGetToken(0, 10, TimeUnit.SECONDS);
                Main.check(token != null, "grant " + i + ": tryLockAndGetToken() of a free lock returned null");
                Main.check(token > prev, "grant " + i + ": token " + token + " after " + prev);
                m.hashHeld("grant " + i, name, Map.of(owner(c), "1"), 8000, 10000);
                Long refused = clients[(i + 1) % 2].getFencedLock(name).tryLockAndGetToken(0, 10, TimeUnit.SECONDS);
                Main.check(refused == null, "grant " + i + ": another client got a held fenced lock, token " + refused);
                Main.check(token.equals(f.getToken()), "grant " + i + ": getToken() = " + f.getToken() + ", the grant's " + token);
                if (env.proxied()) {
                    // The proxy numbers grants with FENCE: no count is kept on the masters.
                    m.gone("grant " + i + ": no counter", "redisson_lock_token:{" + name + "}");
                }
                prev = token;
                f.unlock();
                m.gone("unlock " + i, name);
            }
            // lock() takes no token with the grant: getToken() reads the holder's.
            RFencedLock f = clients[1].getFencedLock(name);
            f.lock(10, TimeUnit.SECONDS);
            Long token = f.getToken();
            Main.check(token != null && token > prev, "lock(): getToken() = " + token + " after " + prev);
            f.unlock();
            m.gone("unlock after lock()", name);
        }
    }

    /** Checks that a majority of masters hold want under the semaphore's key. */
    static void permitsLeft(Masters m, String step, String name, int want) {
        Masters.eventually(step, () -> {
            List<String> seen = m.each(j -> j.get(name));
            long n = seen.stream().filter(String.valueOf(want)::equals).count();
            return n >= m.majority() ? null : name + " holds (want " + want + "): " + seen;
        });
    }

    static void semaphore(Main.Env env) throws Exception {
        Masters m = env.masters();
        try (Clients cs = new Clients()) {
            String name = Main.key("redisson");
            List<RSemaphore> s = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                s.add(cs.open(env.addr(i)).getSemaphore(name));
            }
            Main.check(s.get(0).trySetPermits(2), "trySetPermits(2) of a new semaphore returned false");
            if (!env.proxied()) {
                // Through the proxy the set-up stores a limit of its own
                // (it is RPermitExpirableSemaphore's too), not the count.
                permitsLeft(m, "set permits", name, 2);
            }
            Main.check(s.get(0).tryAcquire(), "the first permit was refused");
            Main.check(s.get(1).tryAcquire(), "the second permit was refused");
            permitsLeft(m, "two holders", name, 0);
            Main.check(!s.get(2).tryAcquire(), "a third client got a permit of two");
            Main.check(s.get(2).availablePermits() == 0, "availablePermits() = " + s.get(2).availablePermits());
            s.get(0).release();
            permitsLeft(m, "one released", name, 1);
            Main.check(s.get(2).tryAcquire(), "a permit released was refused");
            s.get(1).release();
            s.get(2).release();
            permitsLeft(m, "all released", name, 2);
            Main.check(s.get(0).availablePermits() == 2, "availablePermits() = " + s.get(0).availablePermits());
        }
    }

    /**
     * Checks the permits of an RPermitExpirableSemaphore on the masters:
     * on one Redis, the count of free permits under its name; through the
     * proxy, on a majority of masters, the limit it stored and the live
     * permits (a hash field per permit id, "slot:deadline:nonce").
     */
    static void expirableLeft(Main.Env env, String step, String name, int limit, int taken) {
        Masters m = env.masters();
        if (!env.proxied()) {
            permitsLeft(m, step, name, limit - taken);
            return;
        }
        Masters.eventually(step, () -> {
            List<String> seen = m.each(j -> {
                String lim = null;
                for (String k : j.keys("redlock-proxy:semlimit:{*}" + name)) {
                    lim = j.get(k);
                }
                int live = 0;
                long now = System.currentTimeMillis();
                for (String k : j.keys("redlock-proxy:sem:{*}" + name)) {
                    for (String v : j.hgetAll(k).values()) {
                        if (Long.parseLong(v.split(":")[1]) > now) {
                            live++;
                        }
                    }
                }
                return lim + "/" + live + (j.exists(name) ? " and a count under the name" : "");
            });
            String want = limit + "/" + taken;
            long n = seen.stream().filter(want::equals).count();
            return n >= m.majority() ? null : name + ": limit/permits (want " + want + "): " + seen;
        });
    }

    /**
     * Permits with leases: two of two taken, a third refused, the shorter
     * lease expires and its permit is given again, and releases; through
     * the proxy, a permit without a lease is refused (it would never be
     * returned if its holder died).
     */
    static void expirable(Main.Env env) throws Exception {
        try (Clients cs = new Clients()) {
            String name = Main.key("redisson");
            List<RPermitExpirableSemaphore> s = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                s.add(cs.open(env.addr(i)).getPermitExpirableSemaphore(name));
            }
            Main.check(s.get(0).trySetPermits(2), "trySetPermits(2) of a new semaphore returned false");
            Main.check(!s.get(1).trySetPermits(3), "trySetPermits(3) of a semaphore set up returned true");
            expirableLeft(env, "set up", name, 2, 0);
            Main.check(s.get(2).availablePermits() == 2, "availablePermits() = " + s.get(2).availablePermits() + " of a new semaphore of 2");
            String p0 = s.get(0).tryAcquire(0, 10, TimeUnit.SECONDS);
            String p1 = s.get(1).tryAcquire(0, 1, TimeUnit.SECONDS);
            Main.check(p0 != null && p1 != null, "a permit of two was refused");
            expirableLeft(env, "two holders", name, 2, 2);
            Main.check(s.get(2).tryAcquire(0, 10, TimeUnit.SECONDS) == null, "a third client got a permit of two");
            Main.check(s.get(2).availablePermits() == 0, "availablePermits() = " + s.get(2).availablePermits() + " with two holders");
            Main.sleep(1300);
            String p2 = s.get(2).tryAcquire(0, 10, TimeUnit.SECONDS);
            Main.check(p2 != null, "the permit whose lease ended was not given again");
            Main.check(!s.get(1).tryRelease(p1), "the expired permit was released");
            Main.check(s.get(0).tryRelease(p0), "a held permit's release returned false");
            expirableLeft(env, "one released", name, 2, 1);
            Main.check(s.get(1).availablePermits() == 1, "availablePermits() = " + s.get(1).availablePermits() + " with one holder");
            Main.check(s.get(1).tryAcquire(0, 10, TimeUnit.SECONDS) != null, "a released permit was refused");
            Main.check(s.get(2).tryRelease(p2), "a held permit's release returned false");
            if (env.proxied()) {
                try {
                    String forever = s.get(0).tryAcquire();
                    Main.check(false, "a permit without a lease was granted: " + forever);
                } catch (RuntimeException e) {
                    Main.check(String.valueOf(e.getMessage()).contains("need a TTL above 0"), "a permit without a lease: " + e);
                }
            }
        }
    }

    private RedissonCases() {
    }
}
