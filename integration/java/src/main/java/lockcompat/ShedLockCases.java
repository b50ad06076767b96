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

    /** One job's lock and the providers that contend for it, each over its own connection. */
    static final class Job implements AutoCloseable {
        final String name = Main.key("shedlock");
        /** The key ShedLock keeps the job's lock under (its default prefix and environment). */
        final String key = "job-lock:default:" + name;
        private final List<LettuceConnectionFactory> opened = new ArrayList<>();

        /** A provider; safe: built with safeUpdate(true). */
        RedisLockProvider provider(String addr, boolean safe) {
            LettuceConnectionFactory f = SpringCases.factory(addr);
            opened.add(f);
            RedisLockProvider.Builder b = new RedisLockProvider.Builder(f);
            return safe ? b.safeUpdate(true).build() : b.build();
        }

        LockConfiguration config(Duration atMost, Duration atLeast) {
            return new LockConfiguration(Instant.now(), name, atMost, atLeast);
        }

        /** Locks through p, failing when refused. */
        SimpleLock lock(RedisLockProvider p, LockConfiguration c, String what) {
            return p.lock(c).orElseThrow(() -> new AssertionError(what + " returned empty"));
        }

        /** Fails unless p is refused the job's lock. */
        void refused(RedisLockProvider p, String what) {
            Optional<SimpleLock> l = p.lock(config(AT_MOST, Duration.ZERO));
            Main.check(l.isEmpty(), what);
        }

        @Override
        public void close() {
            for (LettuceConnectionFactory f : opened) {
                f.destroy();
            }
        }
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

    static void lifecycle(Main.Env env) {
        Masters m = env.masters();
        try (Job job = new Job()) {
            RedisLockProvider a = job.provider(env.addr(), true);
            RedisLockProvider b = job.provider(env.addr(1), true);
            SimpleLock la = job.lock(a, job.config(AT_MOST, Duration.ZERO), "lock() of a free job lock");
            String v = holder(m, job.key);
            m.stringHeld("lock", job.key, v, AT_MOST_MS - 5000, AT_MOST_MS);
            job.refused(b, "a second client got a held job lock");
            m.stringHeld("refused", job.key, v, AT_MOST_MS - 5000, AT_MOST_MS);
            la.unlock();
            m.gone("unlock", job.key);
            SimpleLock lb = job.lock(b, job.config(AT_MOST, Duration.ZERO), "lock() after the unlock");
            Main.check(!holder(m, job.key).equals(v), "the second holder's value is the first one's");
            lb.unlock();
            m.gone("unlock", job.key);
        }
    }

    static void atLeast(Main.Env env) {
        Masters m = env.masters();
        try (Job job = new Job()) {
            RedisLockProvider a = job.provider(env.addr(), true);
            RedisLockProvider b = job.provider(env.addr(1), true);
            LockConfiguration c = job.config(AT_MOST, Duration.ofMillis(2000));
            SimpleLock la = job.lock(a, c, "lock() of a free job lock");
            String v = holder(m, job.key);
            la.unlock();
            long left = Duration.between(Instant.now(), c.getLockAtLeastUntil()).toMillis();
            m.stringHeld("unlock before lockAtLeastFor", job.key, v, 0, Math.max(left, 1));
            job.refused(b, "a second client got the job lock within lockAtLeastFor");
            Main.sleep(Math.max(0, Duration.between(Instant.now(), c.getLockAtLeastUntil()).toMillis()) + 100);
            m.stringNowhere("lockAtLeastFor passed", job.key, v);
            job.lock(b, job.config(AT_MOST, Duration.ZERO), "lock() after lockAtLeastFor").unlock();
            m.gone("unlock", job.key);
        }
    }

    static void extend(Main.Env env) {
        Masters m = env.masters();
        try (Job job = new Job()) {
            RedisLockProvider a = job.provider(env.addr(), true);
            RedisLockProvider b = job.provider(env.addr(1), true);
            SimpleLock la = job.lock(a, job.config(Duration.ofSeconds(10), Duration.ZERO), "lock() of a free job lock");
            String v = holder(m, job.key);
            m.stringHeld("lock", job.key, v, 8000, 10000);
            SimpleLock extended = la.extend(AT_MOST, Duration.ZERO)
                    .orElseThrow(() -> new AssertionError("extend() of a held job lock returned empty"));
            m.stringHeld("extend", job.key, v, AT_MOST_MS - 5000, AT_MOST_MS);
            job.refused(b, "a second client got an extended job lock");
            extended.unlock();
            m.gone("unlock", job.key);
        }
    }

    static void executor(Main.Env env) throws Exception {
        try (Job job = new Job()) {
            AtomicInteger inside = new AtomicInteger();
            AtomicInteger overlaps = new AtomicInteger();
            AtomicInteger runs = new AtomicInteger();
            List<DefaultLockingTaskExecutor> executors = new ArrayList<>();
            for (int w = 0; w < 4; w++) {
                executors.add(new DefaultLockingTaskExecutor(job.provider(env.addr(w), true)));
            }
            Runnable task = () -> {
                if (inside.incrementAndGet() > 1) {
                    overlaps.incrementAndGet();
                }
                runs.incrementAndGet();
                Main.sleep(15);
                inside.decrementAndGet();
            };
            Contention.run(4, 25, (w, body) -> executors.get(w).executeWithLock(task, job.config(AT_MOST, Duration.ZERO)));
            Main.check(overlaps.get() == 0, overlaps.get() + " runs of the job overlapped another");
            Main.check(runs.get() > 0, "the job never ran");
            Main.log(runs.get() + " of 100 attempts ran the job");
            env.masters().gone("after the runs", job.key);
        }
    }

    static void defaults(Main.Env env) {
        Masters m = env.masters();
        try (Job job = new Job()) {
            RedisLockProvider a = job.provider(env.addr(), false);
            RedisLockProvider b = job.provider(env.addr(1), false);
            SimpleLock la = job.lock(a, job.config(AT_MOST, Duration.ZERO), "lock() of a free job lock");
            String v = holder(m, job.key);
            m.stringHeld("lock", job.key, v, AT_MOST_MS - 5000, AT_MOST_MS);
            job.refused(b, "a second client got a held job lock");
            la.unlock();
            m.gone("unlock", job.key);
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
        try (Job job = new Job()) {
            RedisLockProvider a = job.provider(env.addr(), false);
            SimpleLock la = job.lock(a, job.config(AT_MOST, Duration.ofMillis(2000)), "lock() of a free job lock");
            String v = holder(m, job.key);
            if (!env.proxied()) {
                la.unlock();
                m.stringHeld("unlock before lockAtLeastFor", job.key, v, 0, 2000);
                return;
            }
            try {
                la.unlock();
                throw new AssertionError("the proxy accepted SET XX PX");
            } catch (RuntimeException e) {
                Main.check(Main.describe(e).contains("needs NX"), "unlock failed otherwise: " + Main.describe(e));
            }
            m.stringHeld("unlock refused", job.key, v, AT_MOST_MS - 5000, AT_MOST_MS);
        }
    }

    private ShedLockCases() {
    }
}
