package lockcompat;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.function.Supplier;

import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;

/**
 * What the masters behind a lock address hold, read from each master
 * directly: the lone Redis itself, or every backend of the proxy. The proxy
 * answers once a majority did a command, so the others may lag: every check
 * is retried for a while before it reports the last mismatch.
 */
final class Masters implements AutoCloseable {
    private final List<Jedis> direct = new ArrayList<>();
    private final String[] addrs;

    Masters(String[] addrs) {
        this.addrs = addrs;
        for (String a : addrs) {
            direct.add(new Jedis(HostAndPort.from(a),
                    DefaultJedisClientConfig.builder().socketTimeoutMillis(5000).autoNegotiateProtocol(false).build()));
        }
    }

    int size() {
        return direct.size();
    }

    int majority() {
        return direct.size() / 2 + 1;
    }

    /** Runs read on every master, in order. */
    synchronized <T> List<T> each(Function<Jedis, T> read) {
        List<T> out = new ArrayList<>();
        for (Jedis j : direct) {
            out.add(read.apply(j));
        }
        return out;
    }

    /**
     * Retries check (null: it holds; else what is wrong) for up to three
     * seconds and fails with its last answer.
     */
    static void eventually(String step, Supplier<String> check) {
        long deadline = System.nanoTime() + 3_000_000_000L;
        String last;
        for (;;) {
            last = check.get();
            if (last == null) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new AssertionError(step + ": " + last);
            }
            sleep(20);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    /** Describes each master's answer for an error message. */
    private String describe(List<?> answers) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < answers.size(); i++) {
            b.append(i == 0 ? "" : ", ").append(addrs[i]).append('=').append(answers.get(i));
        }
        return b.toString();
    }

    /**
     * Checks that a majority holds value under the string key, each master
     * that holds it with a PTTL in (lo, hi] milliseconds.
     */
    void stringHeld(String step, String key, String value, long lo, long hi) {
        eventually(step, () -> heldWithin(key + " held by " + value, each(j -> {
            String v = j.get(key);
            return value.equals(v) ? HELD + j.pttl(key) : String.valueOf(v);
        }), lo, hi));
    }

    /**
     * Checks that a majority hold the key (any value: a read hold's lease)
     * with a PTTL in (lo, hi] milliseconds on each of them.
     */
    void anyHeld(String step, String key, long lo, long hi) {
        eventually(step, () -> heldWithin(key + " held", each(j -> {
            long p = j.pttl(key);
            return p == -2 ? "missing" : HELD + p;
        }), lo, hi));
    }

    private static final String HELD = "held pttl ";

    /**
     * Judges the masters' answers, HELD and the PTTL for each that holds:
     * null when a majority hold with a PTTL in (lo, hi] on each holder,
     * else what is wrong.
     */
    private String heldWithin(String what, List<String> seen, long lo, long hi) {
        int n = 0;
        for (String s : seen) {
            if (s.startsWith(HELD)) {
                long p = Long.parseLong(s.substring(HELD.length()));
                if (p <= lo || p > hi) {
                    return what + ": PTTL not in (" + lo + ", " + hi + "]: " + describe(seen);
                }
                n++;
            }
        }
        return n >= majority() ? null : what + " on " + n + " masters, want " + majority() + ": " + describe(seen);
    }

    /** Returns the value a majority of masters hold under key, or null. */
    String majorityValue(String key) {
        Map<String, Integer> counts = new HashMap<>();
        for (String v : each(j -> j.get(key))) {
            if (v != null) {
                counts.merge(v, 1, Integer::sum);
            }
        }
        for (Map.Entry<String, Integer> e : counts.entrySet()) {
            if (e.getValue() >= majority()) {
                return e.getKey();
            }
        }
        return null;
    }

    /** Checks that no master holds value under key (any value when null). */
    void stringNowhere(String step, String key, String value) {
        eventually(step, () -> {
            List<String> seen = each(j -> j.get(key));
            for (String v : seen) {
                if (v != null && (value == null || value.equals(v))) {
                    return key + " still held: " + describe(seen);
                }
            }
            return null;
        });
    }

    /** Checks that no master has key at all. */
    void gone(String step, String key) {
        eventually(step, () -> {
            List<Boolean> seen = each(j -> j.exists(key));
            return seen.contains(true) ? key + " exists: " + describe(seen) : null;
        });
    }

    /**
     * Checks that a majority hold exactly fields under the hash key, with a
     * PTTL in (lo, hi] milliseconds on each of them.
     */
    void hashHeld(String step, String key, Map<String, String> fields, long lo, long hi) {
        eventually(step, () -> heldWithin(key + " holding " + fields, each(j -> {
            Map<String, String> h = j.hgetAll(key);
            return h.equals(fields) ? HELD + j.pttl(key) : h.toString();
        }), lo, hi));
    }

    @Override
    public synchronized void close() {
        for (Jedis j : direct) {
            j.close();
        }
    }
}
