package lockcompat;

import java.util.Map;

import org.springframework.data.redis.connection.RedisStandaloneConfiguration;
import org.springframework.data.redis.connection.lettuce.LettuceConnectionFactory;
import redis.clients.jedis.HostAndPort;

final class SpringCases {
    static Map<String, Main.Case> cases() {
        return Main.ordered();
    }

    /** A started Lettuce connection factory to addr. */
    static LettuceConnectionFactory factory(String addr) {
        HostAndPort hp = HostAndPort.from(addr);
        LettuceConnectionFactory f = new LettuceConnectionFactory(new RedisStandaloneConfiguration(hp.getHost(), hp.getPort()));
        f.afterPropertiesSet();
        f.start();
        return f;
    }

    private SpringCases() {
    }
}
