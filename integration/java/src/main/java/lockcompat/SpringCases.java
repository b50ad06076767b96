package lockcompat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;

import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import org.springframework.integration.redis.util.RedisLockRegistry;
import org.springframework.integration.redis.util.RedisLockRegistry.RedisLockType;
import org.springframework.scheduling.concurrent.ThreadPoolTaskScheduler;
import redis.clients.jedis.HostAndPort;

/**
 * Spring Integration's RedisLockRegistry over Spring Data Redis and
 * Lettuce, in both its lock types: SPIN_LOCK (a waiter polls) and
 * PUB_SUB_LOCK (a waiter is woken by the release's message). It acquires
 * with an extend-or-acquire script, renews with SET IFEQ PX (a script on a
 * Redis that lacks it) and releases with DELEX IFEQ (SPIN_LOCK; a script
 * on a Redis that lacks it) or a script that publishes (PUB_SUB_LOCK).
 */
final class SpringCases {
    static Map<String, Main.Case> cases() {
        List<Object> all = new ArrayList<>();
        for (RedisLockType type : RedisLockType.values()) {
            all.add(type + ": tryLock, refusal, unlock");
            all.add((Main.Case) env -> lifecycle(env, type));
            all.add(type + ": a waiter gets the lock at its release");
            all.add((Main.Case) env -> waiter(env, type));
            all.add(type + ": renewal keeps the lock past expireAfter");
            all.add((Main.Case) env -> renewal(env, type));
            all.add(type + ": four registries contend");
            all.add((Main.Case) env -> contention(env, type));
        }
        return Main.ordered(all.toArray());
    }

    /** A started Lettuce connection factory to addr. */
    static LettuceConnectionFactory factory(String addr) {
        HostAndPort hp = HostAndPort.from(addr);
        LettuceConnectionFactory f = new LettuceConnectionFactory(new RedisStandaloneConfiguration(hp.getHost(), hp.getPort()));
        f.afterPropertiesSet();
        f.start();
        return f;
    }

    /** Registries (each with its own client id and connection) and what they opened. */
    static final class Registries implements AutoCloseable {
        final String registryKey = Main.key("spring");
        private final List<RedisLockRegistry> registries = new ArrayList<>();
        private final List<LettuceConnectionFactory> factories = new ArrayList<>();
        private final List<ThreadPoolTaskScheduler> schedulers = new ArrayList<>();

        RedisLockRegistry open(String addr, RedisLockType type, long expireAfterMs, boolean renew) {
            LettuceConnectionFactory f = factory(addr);
            factories.add(f);
            RedisLockRegistry r = new RedisLockRegistry(f, registryKey, expireAfterMs);
            r.setRedisLockType(type);
            if (renew) {
                ThreadPoolTaskScheduler s = new ThreadPoolTaskScheduler();
                s.initialize();
                schedulers.add(s);
                r.setRenewalTaskScheduler(s);
            }
            registries.add(r);
            return r;
        }

        /** The key the registry keeps path's lock under. */
        String key(String path) {
            return registryKey + ":" + path;
        }

        @Override
        public void close() {
            for (RedisLockRegistry r : registries) {
                r.destroy();
            }
            for (ThreadPoolTaskScheduler s : schedulers) {
                s.shutdown();
            }
            for (LettuceConnectionFactory f : factories) {
                f.destroy();
            }
        }
    }

    static void lifecycle(Main.Env env, RedisLockType type) throws Exception {
        Masters m = env.masters();
        try (Registries rs = new Registries()) {
            Lock a = rs.open(env.addr(), type, 10000, false).obtain("res");
            Lock b = rs.open(env.addr(1), type, 10000, false).obtain("res");
            String key = rs.key("res");
            Main.check(a.tryLock(), "tryLock() of a free lock returned false");
            String v = ShedLockCases.holder(m, key);
            m.stringHeld("lock", key, v, 8000, 10000);
            Main.check(!b.tryLock(), "another registry got a held lock");
            m.stringHeld("refused", key, v, 7000, 10000);
            a.unlock();
            m.gone("unlock", key);
            Main.check(b.tryLock(), "tryLock() after the unlock returned false");
            String w = ShedLockCases.holder(m, key);
            Main.check(!w.equals(v), "both registries hold with the same client id");
            m.stringHeld("lock after unlock", key, w, 8000, 10000);
            b.unlock();
            m.gone("unlock", key);
        }
    }

    /**
     * A waiter in tryLock(8 s) gets the lock when the holder releases it:
     * by polling every 100 ms (SPIN_LOCK) or woken by the release's message
     * (PUB_SUB_LOCK, which otherwise would wait out its 8 s). The hand-off
     * time is printed.
     */
    static void waiter(Main.Env env, RedisLockType type) throws Exception {
        Masters m = env.masters();
        try (Registries rs = new Registries()) {
            Lock a = rs.open(env.addr(), type, 10000, false).obtain("res");
            Lock b = rs.open(env.addr(1), type, 10000, false).obtain("res");
            String key = rs.key("res");
            Main.check(a.tryLock(), "tryLock() of a free lock returned false");
            String v = ShedLockCases.holder(m, key);
            CompletableFuture<Long> got = CompletableFuture.supplyAsync(() -> {
                try {
                    return b.tryLock(8, TimeUnit.SECONDS) ? System.nanoTime() : -1L;
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            Main.sleep(500);
            Main.check(!got.isDone(), "the waiter returned while the lock was held");
            long released = System.nanoTime();
            a.unlock();
            long at = got.get(10, TimeUnit.SECONDS);
            Main.check(at > 0, "the waiter gave up");
            long handoff = (at - released) / 1_000_000;
            Main.log("hand-off " + handoff + " ms");
            Main.check(handoff < 4000, "the waiter got the lock " + handoff + " ms after the release: it was not woken");
            String w = ShedLockCases.holder(m, key);
            Main.check(!w.equals(v), "the waiter holds with the first holder's id");
            m.stringHeld("waiter holds", key, w, 7000, 10000);
            // The lock is the waiting thread's: it is released with the registry.
        }
    }

    /**
     * With a renewal scheduler, a lock of expireAfter 1.5 s is renewed
     * every 0.5 s by SET IFEQ PX: held 4.5 s, another registry refused
     * throughout, each master's PTTL never above 1.5 s.
     */
    static void renewal(Main.Env env, RedisLockType type) throws Exception {
        Masters m = env.masters();
        try (Registries rs = new Registries()) {
            Lock a = rs.open(env.addr(), type, 1500, true).obtain("res");
            Lock b = rs.open(env.addr(1), type, 1500, false).obtain("res");
            String key = rs.key("res");
            Main.check(a.tryLock(), "tryLock() of a free lock returned false");
            String v = ShedLockCases.holder(m, key);
            long end = System.nanoTime() + 4_500_000_000L;
            while (System.nanoTime() < end) {
                m.stringHeld("renewed", key, v, 0, 1500);
                Main.check(!b.tryLock(), "another registry got a renewed lock");
                Main.sleep(300);
            }
            a.unlock();
            m.gone("unlock", key);
        }
    }

    static void contention(Main.Env env, RedisLockType type) throws Exception {
        try (Registries rs = new Registries()) {
            List<Lock> locks = new ArrayList<>();
            for (int w = 0; w < 4; w++) {
                locks.add(rs.open(env.addr(w), type, 10000, false).obtain("res"));
            }
            Contention.assertExclusive(4, 15, (w, body) -> {
                Main.check(locks.get(w).tryLock(Duration.ofSeconds(20).toMillis(), TimeUnit.MILLISECONDS),
                        "tryLock(20 s) gave up");
                try {
                    body.run();
                } finally {
                    locks.get(w).unlock();
                }
            });
            env.masters().gone("after contention", rs.key("res"));
        }
    }

    private SpringCases() {
    }
}
