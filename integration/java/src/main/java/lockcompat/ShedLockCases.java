package lockcompat;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;

import net.javacrumbs.shedlock.core.DefaultLockingTaskExecutor;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import net.javacrumbs.shedlock.provider.redis.spring.RedisLockProvider;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;

/**
 * ShedLock's Redis provider (shedlock-provider-redis-spring, over Spring
 * Data Redis and Lettuce): a job lock held for minutes (lockAtMostFor),
 * kept after the job for lockAtLeastFor, extended, and run through
 * ShedLock's executor from several clients at once. With safeUpdate it
 * releases and extends by compare-and-delete and compare-and-pexpire
 * scripts; with its defaults by DEL and SET XX PX.
 */
final class ShedLockCases {
    static final Duration AT_MOST = Duration.ofMinutes(4);
    static final long AT_MOST_MS = AT_MOST.toMillis();

    static Map<String, Main.Case> cases() {
        return Main.ordered(
                "safeUpdate: lockAtMostFor 4 min, refusal, unlock", (Main.Case) ShedLockCases::lifecycle,
                "safeUpdate: lockAtLeastFor keeps the lock after unlock", (Main.Case) ShedLockCases::atLeast,
                "safeUpdate: extend to 4 min", (Main.Case) ShedLockCases::extend,
                "safeUpdate: executeWithLock from four clients", (Main.Case) ShedLockCases::executor,
                "defaults: lock, refusal, unlock by DEL", (Main.Case) ShedLockCases::defaults,
                "defaults: lockAtLeastFor unlock by SET XX PX", (Main.Case) ShedLockCases::defaultsAtLeast);
    }

    /** Provider over its own connection; safe: safeUpdate(true). */
    static RedisLockProvider provider(List<LettuceConnectionFactory> opened, String addr, boolean safe) {
        LettuceConnectionFactory f = SpringCases.factory(addr);
        opened.add(f);
        RedisLockProvider.Builder b = new RedisLockProvider.Builder(f);
        return safe ? b.safeUpdate(true).build() : b.build();
    }

    static LockConfiguration config(String name, Duration atMost, Duration atLeast) {
        return new LockConfiguration(Instant.now(), name, atMost, atLeast);
    }

    /** The key ShedLock keeps a job's lock under (its default prefix and environment). */
    static String key(String name) {
        return "job-lock:default:" + name;
    }

    /** Returns the value the masters' majority hold under key, failing when none does. */
    static String holder(Masters m, String key) {
        String[] v = new String[1];
        Masters.eventually("acquire", () -> {
            v[0] = m.majorityValue(key);
            return v[0] != null ? null : "no value held by a majority under " + key;
        });
        return v[0];
    }

    static void close(List<LettuceConnectionFactory> opened) {
        for (LettuceConnectionFactory f : opened) {
            f.destroy();
        }
    }

    static void lifecycle(Main.Env env) {
        Masters m = env.masters();
        List<LettuceConnectionFactory> opened = new ArrayList<>();
        try {
            RedisLockProvider a = provider(opened, env.addr(), true);
            RedisLockProvider b = provider(opened, env.addr(1), true);
            String name = Main.key("shedlock");
            String key = key(name);
            Optional<SimpleLock> la = a.lock(config(name, AT_MOST, Duration.ZERO));
            Main.check(la.isPresent(), "lock() of a free job lock returned empty");
            String v = holder(m, key);
            m.stringHeld("lock", key, v, AT_MOST_MS - 5000, AT_MOST_MS);
            Main.check(b.lock(config(name, AT_MOST, Duration.ZERO)).isEmpty(), "a second client got a held job lock");
            m.stringHeld("refused", key, v, AT_MOST_MS - 5000, AT_MOST_MS);
            la.get().unlock();
            m.gone("unlock", key);
            Optional<SimpleLock> lb = b.lock(config(name, AT_MOST, Duration.ZERO));
            Main.check(lb.isPresent(), "lock() after the unlock returned empty");
            String w = holder(m, key);
            Main.check(!w.equals(v), "the second holder's value is the first one's");
            lb.get().unlock();
            m.gone("unlock", key);
        } finally {
            close(opened);
        }
    }

    static void atLeast(Main.Env env) {
        Masters m = env.masters();
        List<LettuceConnectionFactory> opened = new ArrayList<>();
        try {
            RedisLockProvider a = provider(opened, env.addr(), true);
            RedisLockProvider b = provider(opened, env.addr(1), true);
            String name = Main.key("shedlock");
            String key = key(name);
            LockConfiguration c = config(name, AT_MOST, Duration.ofMillis(2000));
            SimpleLock la = a.lock(c).orElseThrow(() -> new AssertionError("lock() of a free job lock returned empty"));
            String v = holder(m, key);
            la.unlock();
            long left = Duration.between(Instant.now(), c.getLockAtLeastUntil()).toMillis();
            m.stringHeld("unlock before lockAtLeastFor", key, v, 0, Math.max(left, 1));
            Main.check(b.lock(config(name, AT_MOST, Duration.ZERO)).isEmpty(),
                    "a second client got the job lock within lockAtLeastFor");
            Main.sleep(Math.max(0, Duration.between(Instant.now(), c.getLockAtLeastUntil()).toMillis()) + 100);
            m.stringNowhere("lockAtLeastFor passed", key, v);
            SimpleLock lb = b.lock(config(name, AT_MOST, Duration.ZERO))
                    .orElseThrow(() -> new AssertionError("lock() after lockAtLeastFor returned empty"));
            lb.unlock();
            m.gone("unlock", key);
        } finally {
            close(opened);
        }
    }

    static void extend(Main.Env env) {
        Masters m = env.masters();
        List<LettuceConnectionFactory> opened = new ArrayList<>();
        try {
            RedisLockProvider a = provider(opened, env.addr(), true);
            RedisLockProvider b = provider(opened, env.addr(1), true);
            String name = Main.key("shedlock");
            String key = key(name);
            SimpleLock la = a.lock(config(name, Duration.ofSeconds(10), Duration.ZERO))
                    .orElseThrow(() -> new AssertionError("lock() of a free job lock returned empty"));
            String v = holder(m, key);
            m.stringHeld("lock", key, v, 8000, 10000);
            SimpleLock extended = la.extend(AT_MOST, Duration.ZERO)
                    .orElseThrow(() -> new AssertionError("extend() of a held job lock returned empty"));
            m.stringHeld("extend", key, v, AT_MOST_MS - 5000, AT_MOST_MS);
            Main.check(b.lock(config(name, AT_MOST, Duration.ZERO)).isEmpty(), "a second client got an extended job lock");
            extended.unlock();
            m.gone("unlock", key);
        } finally {
            close(opened);
        }
    }

    static void executor(Main.Env env) throws Exception {
        List<LettuceConnectionFactory> opened = new ArrayList<>();
        try {
            String name = Main.key("shedlock");
            AtomicInteger inside = new AtomicInteger();
            AtomicInteger overlaps = new AtomicInteger();
            AtomicInteger runs = new AtomicInteger();
            List<DefaultLockingTaskExecutor> executors = new ArrayList<>();
            for (int w = 0; w < 4; w++) {
                executors.add(new DefaultLockingTaskExecutor(provider(opened, env.addr(w), true)));
            }
            Runnable job = () -> {
                if (inside.incrementAndGet() > 1) {
                    overlaps.incrementAndGet();
                }
                runs.incrementAndGet();
                Main.sleep(15);
                inside.decrementAndGet();
            };
            Contention.run(4, 25, (w, body) -> executors.get(w).executeWithLock(job, config(name, AT_MOST, Duration.ZERO)));
            Main.check(overlaps.get() == 0, overlaps.get() + " runs of the job overlapped another");
            Main.check(runs.get() > 0, "the job never ran");
            Main.log(runs.get() + " of 100 attempts ran the job");
            env.masters().gone("after the runs", key(name));
        } finally {
            close(opened);
        }
    }

    static void defaults(Main.Env env) {
        Masters m = env.masters();
        List<LettuceConnectionFactory> opened = new ArrayList<>();
        try {
            RedisLockProvider a = provider(opened, env.addr(), false);
            RedisLockProvider b = provider(opened, env.addr(1), false);
            String name = Main.key("shedlock");
            String key = key(name);
            SimpleLock la = a.lock(config(name, AT_MOST, Duration.ZERO))
                    .orElseThrow(() -> new AssertionError("lock() of a free job lock returned empty"));
            String v = holder(m, key);
            m.stringHeld("lock", key, v, AT_MOST_MS - 5000, AT_MOST_MS);
            Main.check(b.lock(config(name, AT_MOST, Duration.ZERO)).isEmpty(), "a second client got a held job lock");
            la.unlock();
            m.gone("unlock", key);
        } finally {
            close(opened);
        }
    }

    /**
     * With its defaults, ShedLock keeps a job's lock for lockAtLeastFor by
     * SET key value XX PX. One Redis does it; the proxy refuses it (it
     * would overwrite whatever token holds the key) and says to use NX, so
     * the lock stays until lockAtMostFor: safeUpdate(true) is needed.
     */
    static void defaultsAtLeast(Main.Env env) {
        Masters m = env.masters();
        List<LettuceConnectionFactory> opened = new ArrayList<>();
        try {
            RedisLockProvider a = provider(opened, env.addr(), false);
            String name = Main.key("shedlock");
            String key = key(name);
            LockConfiguration c = config(name, AT_MOST, Duration.ofMillis(2000));
            SimpleLock la = a.lock(c).orElseThrow(() -> new AssertionError("lock() of a free job lock returned empty"));
            String v = holder(m, key);
            if (!env.proxied()) {
                la.unlock();
                m.stringHeld("unlock before lockAtLeastFor", key, v, 0, 2000);
                return;
            }
            try {
                la.unlock();
                throw new AssertionError("the proxy accepted SET XX PX");
            } catch (RuntimeException e) {
                Main.check(Main.describe(e).contains("needs NX"), "unlock failed otherwise: " + Main.describe(e));
            }
            m.stringHeld("unlock refused", key, v, AT_MOST_MS - 5000, AT_MOST_MS);
        } finally {
            close(opened);
        }
    }

    private ShedLockCases() {
    }
}
