package lockcompat;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Java lock libraries, unchanged, against one lock address: a lone Redis,
 * or redlock-proxy in front of several masters. Each library family runs
 * its cases in one JVM; every step that changes what the server holds is
 * checked on each master directly (Masters).
 *
 * <pre>
 * LOCK_ADDRS=host:port[,host:port...] MASTERS=host:port,... java lockcompat.Main FAMILY [CASE...]
 * </pre>
 *
 * LOCK_ADDRS are addresses that serve the same masters (several proxies, or
 * the lone Redis once); the cases lock through the first unless they say
 * otherwise. Prints one line per case ("PASS name" or "FAIL name -- why") and
 * a closing "cases: N passed, M failed"; the exit status is 1 if any failed.
 */
public final class Main {
    /** A case of a family: it throws on any failed check. */
    interface Case {
        void run(Env env) throws Exception;
    }

    /** What a case runs against. */
    record Env(String[] lockAddrs, Masters masters) {
        String addr() {
            return lockAddrs[0];
        }

        /** The i-th lock address, round robin. */
        String addr(int i) {
            return lockAddrs[i % lockAddrs.length];
        }

        /** Whether the lock address is a proxy over several masters. */
        boolean proxied() {
            return masters.size() > 1;
        }
    }

    private static final AtomicInteger SEQ = new AtomicInteger();

    /** Returns a key no other case uses. */
    static String key(String prefix) {
        return prefix + ":" + ProcessHandle.current().pid() + ":" + System.currentTimeMillis() + ":"
                + SEQ.incrementAndGet();
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static void sleep(long ms) {
        Masters.sleep(ms);
    }

    static void log(String line) {
        System.out.println("  " + line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: lockcompat.Main jedis|shedlock|spring|redisson [CASE...]");
            System.exit(2);
        }
        String lockAddrs = System.getenv("LOCK_ADDRS");
        String masters = System.getenv("MASTERS");
        if (lockAddrs == null || lockAddrs.isEmpty() || masters == null || masters.isEmpty()) {
            System.err.println("LOCK_ADDRS and MASTERS must be set");
            System.exit(2);
        }
        Map<String, Case> cases = switch (args[0]) {
            case "jedis" -> JedisCases.cases();
            case "shedlock" -> ShedLockCases.cases();
            case "spring" -> SpringCases.cases();
            case "redisson" -> RedissonCases.cases();
            default -> null;
        };
        if (cases == null) {
            System.err.println("unknown family " + args[0]);
            System.exit(2);
            return;
        }
        List<String> only = List.of(args).subList(1, args.length);
        int passed = 0;
        int failed = 0;
        try (Masters m = new Masters(masters.split(","))) {
            Env env = new Env(lockAddrs.split(","), m);
            for (Map.Entry<String, Case> c : cases.entrySet()) {
                if (!only.isEmpty() && !only.contains(c.getKey())) {
                    continue;
                }
                long start = System.nanoTime();
                try {
                    c.getValue().run(env);
                    passed++;
                    System.out.printf("PASS %s (%d ms)%n", c.getKey(), (System.nanoTime() - start) / 1_000_000);
                } catch (Throwable e) {
                    failed++;
                    System.out.printf("FAIL %s -- %s%n", c.getKey(), describe(e));
                }
                System.out.flush();
            }
        }
        System.out.printf("cases: %d passed, %d failed%n", passed, failed);
        System.out.flush();
        // Library threads (schedulers, event loops) must not keep the JVM.
        Runtime.getRuntime().halt(failed == 0 ? 0 : 1);
    }

    /** An exception and its causes, on one line. */
    static String describe(Throwable e) {
        StringBuilder b = new StringBuilder();
        List<Throwable> seen = new ArrayList<>();
        for (Throwable t = e; t != null && !seen.contains(t); t = t.getCause()) {
            seen.add(t);
            b.append(seen.size() == 1 ? "" : " <- ").append(t.getClass().getSimpleName()).append(": ")
                    .append(String.valueOf(t.getMessage()).replace('\n', ' '));
        }
        return b.toString();
    }

    /** Builds an ordered map of cases. */
    static Map<String, Case> ordered(Object... nameAndCase) {
        Map<String, Case> m = new LinkedHashMap<>();
        for (int i = 0; i < nameAndCase.length; i += 2) {
            m.put((String) nameAndCase[i], (Case) nameAndCase[i + 1]);
        }
        return m;
    }

    private Main() {
    }
}
