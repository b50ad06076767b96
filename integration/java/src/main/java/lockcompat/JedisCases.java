package lockcompat;

import java.util.List;
import java.util.Map;
import java.util.UUID;

import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.RedisClient;
import redis.clients.jedis.params.SetParams;

/**
 * Plain Jedis: SET key token NX PX to acquire, a compare-and-delete script
 * to release and a compare-and-pexpire script to extend (the single-instance
 * pattern of the Redis documentation), with the Jedis connection class and
 * with the pooled RedisClient.
 */
final class JedisCases {
    static final String RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then "
            + "return redis.call('del', KEYS[1]) else return 0 end";
    static final String EXTEND = "if redis.call('get', KEYS[1]) == ARGV[1] then "
            + "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

    static Map<String, Main.Case> cases() {
        return Main.ordered(
                "contention control: without a lock, updates are lost", (Main.Case) env -> Contention.assertControlLoses(),
                "SET NX PX, refusal, compare-and-delete", (Main.Case) JedisCases::lifecycle,
                "extend by compare-and-pexpire", (Main.Case) JedisCases::extend,
                "expiry frees the lock", (Main.Case) JedisCases::expiry,
                "contention: no lost update", (Main.Case) JedisCases::contention);
    }

    static Jedis connect(String addr) {
        return new Jedis(HostAndPort.from(addr), DefaultJedisClientConfig.builder().socketTimeoutMillis(10000).autoNegotiateProtocol(false).build());
    }

    static String token() {
        return UUID.randomUUID().toString();
    }

    static boolean acquire(Jedis j, String key, String token, long ms) {
        return "OK".equals(j.set(key, token, SetParams.setParams().nx().px(ms)));
    }

    static long release(Jedis j, String key, String token) {
        return (Long) j.eval(RELEASE, List.of(key), List.of(token));
    }

    static void lifecycle(Main.Env env) {
        Masters m = env.masters();
        String key = Main.key("jedis");
        String a = token();
        String b = token();
        try (Jedis ja = connect(env.addr()); Jedis jb = connect(env.addr(1))) {
            Main.check(acquire(ja, key, a, 10000), "SET NX PX of a free key was refused");
            m.stringHeld("acquire", key, a, 8000, 10000);
            Main.check(!acquire(jb, key, b, 10000), "SET NX PX of a held key was granted");
            m.stringNowhere("refused", key, b);
            m.stringHeld("refused", key, a, 8000, 10000);
            Main.check(release(jb, key, b) == 0, "a release with another token deleted the lock");
            m.stringHeld("release by another", key, a, 8000, 10000);
            Main.check(release(ja, key, a) == 1, "the holder's release returned 0");
            m.gone("release", key);
            Main.check(acquire(jb, key, b, 10000), "SET NX PX after the release was refused");
            m.stringHeld("acquire after release", key, b, 8000, 10000);
            Main.check(release(jb, key, b) == 1, "the second holder's release returned 0");
            m.gone("release", key);
        }
    }

    static void extend(Main.Env env) {
        Masters m = env.masters();
        String key = Main.key("jedis");
        String a = token();
        try (Jedis j = connect(env.addr())) {
            Main.check(acquire(j, key, a, 5000), "SET NX PX of a free key was refused");
            m.stringHeld("acquire", key, a, 3000, 5000);
            Main.check((Long) j.eval(EXTEND, List.of(key), List.of(a, "20000")) == 1, "the holder's extend returned 0");
            m.stringHeld("extend", key, a, 18000, 20000);
            Main.check((Long) j.eval(EXTEND, List.of(key), List.of(token(), "60000")) == 0,
                    "an extend with another token returned 1");
            m.stringHeld("extend by another", key, a, 17000, 20000);
            long pttl = j.pttl(key);
            Main.check(pttl > 17000 && pttl <= 20000, "PTTL through the lock address: " + pttl);
            Main.check(release(j, key, a) == 1, "the holder's release returned 0");
            m.gone("release", key);
        }
    }

    static void expiry(Main.Env env) {
        Masters m = env.masters();
        String key = Main.key("jedis");
        String a = token();
        String b = token();
        try (Jedis j = connect(env.addr())) {
            Main.check(acquire(j, key, a, 300), "SET NX PX of a free key was refused");
            Main.sleep(400);
            m.stringNowhere("expired", key, a);
            Main.check(acquire(j, key, b, 10000), "SET NX PX after expiry was refused");
            m.stringHeld("acquire after expiry", key, b, 8000, 10000);
            Main.check(release(j, key, a) == 0, "the expired holder's release deleted the new lock");
            m.stringHeld("late release", key, b, 8000, 10000);
            Main.check(release(j, key, b) == 1, "the holder's release returned 0");
            m.gone("release", key);
        }
    }

    static void contention(Main.Env env) throws Exception {
        String key = Main.key("jedis");
        int workers = 6;
        // RedisClient: Jedis's pooled client, which negotiates RESP3.
        RedisClient[] conns = new RedisClient[workers];
        for (int w = 0; w < workers; w++) {
            conns[w] = RedisClient.create(HostAndPort.from(env.addr(w)));
        }
        try {
            Contention.assertExclusive(workers, 20, (w, body) -> {
                String t = token();
                while (!"OK".equals(conns[w].set(key, t, SetParams.setParams().nx().px(10000)))) {
                    Main.sleep(5);
                }
                try {
                    body.run();
                } finally {
                    Main.check((Long) conns[w].eval(RELEASE, List.of(key), List.of(t)) == 1, "a release returned 0");
                }
            });
        } finally {
            for (RedisClient c : conns) {
                c.close();
            }
        }
        env.masters().gone("after contention", key);
    }

    private JedisCases() {
    }
}
