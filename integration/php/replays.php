<?php
// The call sequences of two PHP lock libraries on the Redlock page that no
// registry here carries, replayed with phpredis (Debian's php-redis)
// against one Redis address (a lone Redis, or redlock-proxy in front of
// several masters). Their commands are sent as they send them, in their
// argument layout; the scripts are this project's, of the same behaviour.
//
//  - redlock-php (ronnylt): set($resource, $token, ['NX', 'PX' => $ttl])
//    with a uniqid() token, and a release script by EVAL every time.
//  - cheprasov/php-redis-lock: SET key token PX ms NX; release and update
//    (PEXPIRE) scripts by EVALSHA with their SHA1s, and EVAL of the text
//    on NOSCRIPT; GET to ask whether it is still held.
//
// The trace and its acknowledgements are lockprog.php's.
//
//   php replays.php --lib cheprasov --addr 127.0.0.1:6379 --scenario lifecycle

require_once __DIR__ . '/lockprog.php';

const RELEASE = "local v = redis.call('GET', KEYS[1])\nif v == ARGV[1] then return redis.call('DEL', KEYS[1]) end\nreturn 0";
const UPDATE = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\nreturn redis.call('PEXPIRE', KEYS[1], ARGV[2])";

$opts = getopt('', ['addr:', 'scenario:', 'prefix:', 'lib:', 'wait-ack']);
$waitAck = isset($opts['wait-ack']);
$lib = $opts['lib'] ?? '';
[$host, $port] = explode(':', $opts['addr'] ?? '') + [1 => ''];

function connect(): Redis
{
    global $host, $port;
    $r = new Redis();
    check($r->connect($host, (int) $port, 5), "cannot connect to $host:$port");
    $r->setOption(Redis::OPT_READ_TIMEOUT, 10);
    return $r;
}

function redlockPhp(string $key): void
{
    $r = connect();
    $mine = uniqid();
    check($r->set($key, $mine, ['NX', 'PX' => 10000]) === true, 'set NX PX of a free key did not answer true');
    emit('acquire', ['key' => $key, 'token' => $mine, 'ttl_ms' => 10000]);
    $theirs = uniqid('', true);
    check($r->set($key, $theirs, ['NX', 'PX' => 10000]) === false, 'set NX PX of a held key did not answer false');
    // A failed lock releases on every instance, with its own token.
    check($r->eval(RELEASE, [$key, $theirs], 1) === 0, 'release with another token did not answer 0');
    emit('refused', ['key' => $key, 'token' => $theirs, 'holder' => $mine, 'ttl_ms' => 10000, 'age_ms' => 1000]);
    check($r->eval(RELEASE, [$key, $mine], 1) === 1, 'release by the holder did not answer 1');
    emit('release', ['key' => $key, 'token' => $mine]);
}

// evalsha is cheprasov's execLua: EVALSHA, and the text on NOSCRIPT.
function evalsha(Redis $r, string $script, array $args)
{
    $r->clearLastError();
    $v = $r->evalSha(sha1($script), $args, 1);
    $err = (string) $r->getLastError();
    if ($v === false && strpos($err, 'NOSCRIPT') === 0) {
        $r->clearLastError();
        $v = $r->eval($script, $args, 1);
        $err = (string) $r->getLastError();
    }
    check($err === '', "the script failed: $err");
    return $v;
}

function cheprasov(string $key): void
{
    $r = connect();
    $mine = getmypid() . ':' . microtime() . ':' . mt_rand(1, 9999);
    check($r->rawCommand('SET', $key, $mine, 'PX', 10000, 'NX') === true, 'SET PX NX of a free key did not answer OK');
    emit('acquire', ['key' => $key, 'token' => $mine, 'ttl_ms' => 10000]);
    $theirs = getmypid() . ':' . microtime() . ':' . mt_rand(10000, 19999);
    check($r->rawCommand('SET', $key, $theirs, 'PX', 10000, 'NX') === false, 'SET PX NX of a held key did not answer nil');
    check($r->get($key) === $mine, 'isLocked(): GET does not answer the holder\'s token');
    emit('refused', ['key' => $key, 'token' => $theirs, 'holder' => $mine, 'ttl_ms' => 10000, 'age_ms' => 1000]);
    check(evalsha($r, UPDATE, [$key, $theirs, 20000]) === 0, 'update() with another token did not answer 0');
    check(evalsha($r, RELEASE, [$key, $theirs]) === 0, 'release() with another token did not answer 0');
    emit('not-owner', ['key' => $key, 'token' => $mine, 'other' => $theirs, 'ttl_ms' => 10000, 'age_ms' => 1000]);
    check(evalsha($r, UPDATE, [$key, $mine, 20000]) === 1, 'update(20) by the holder did not answer 1');
    emit('extend', ['key' => $key, 'token' => $mine, 'ttl_ms' => 20000]);
    check(evalsha($r, RELEASE, [$key, $mine]) === 1, 'release() by the holder did not answer 1');
    emit('release', ['key' => $key, 'token' => $mine]);
}

$scenario = $opts['scenario'] ?? '';
$key = ($opts['prefix'] ?? $lib) . ":$scenario:" . bin2hex(random_bytes(8));
runScenario(function () use ($scenario, $lib, $key) {
    check(extension_loaded('redis'), 'the phpredis extension is not loaded');
    check($scenario === 'lifecycle', "unknown scenario '$scenario'");
    switch ($lib) {
        case 'redlock-php':
            redlockPhp($key);
            break;
        case 'cheprasov':
            cheprasov($key);
            break;
        default:
            throw new CheckFailed("unknown library '$lib'");
    }
});
