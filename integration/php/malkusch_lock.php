<?php
// malkusch/lock's PHPRedisMutex (phpredis) and PredisMutex (Predis), from
// Debian's php-malkusch-lock and php-predis, unchanged, against one Redis
// address (a lone Redis, or redlock-proxy in front of several masters)
// given as the mutex's only server.
//
// The mutex keeps its key as "lock_" and the name, with a TTL of its
// timeout plus one second, and its token private: the trace reads the
// token with reflection, and changes nothing. Runs one scenario and checks
// every result the library returns; the trace and its acknowledgements are
// lockprog.php's.
//
//   php malkusch_lock.php --client phpredis --addr 127.0.0.1:6379 --scenario lifecycle

require_once 'Malkusch/Lock/autoload.php';
require_once 'Predis/autoload.php';
require_once __DIR__ . '/lockprog.php';

use malkusch\lock\exception\ExecutionOutsideLockException;
use malkusch\lock\exception\TimeoutException;
use malkusch\lock\mutex\PHPRedisMutex;
use malkusch\lock\mutex\PredisMutex;
use malkusch\lock\mutex\RedisMutex;

$opts = getopt('', ['addr:', 'scenario:', 'prefix:', 'client:', 'wait-ack', 'workers:', 'rounds:', 'no-lock']);
$waitAck = isset($opts['wait-ack']);
$noLock = isset($opts['no-lock']);
$prefix = $opts['prefix'] ?? 'malkusch';
$client = $opts['client'] ?? 'phpredis';
[$host, $port] = explode(':', $opts['addr'] ?? '') + [1 => ''];

// mutex returns a mutex on its own connection (a forked child must not
// share its parent's socket), with the client named by --client.
function mutex(string $name, int $timeout): RedisMutex
{
    global $host, $port, $client;
    if ($client === 'predis') {
        $c = new Predis\Client(['host' => $host, 'port' => (int) $port, 'read_write_timeout' => 10]);
        return new PredisMutex([$c], $name, $timeout);
    }
    $r = new Redis();
    check($r->connect($host, (int) $port, 5), "phpredis cannot connect to $host:$port");
    $r->setOption(Redis::OPT_READ_TIMEOUT, 10);
    return new PHPRedisMutex([$r], $name, $timeout);
}

// token is the token the mutex last tried or holds.
function token(RedisMutex $m): string
{
    $p = new ReflectionProperty(RedisMutex::class, 'token');
    $p->setAccessible(true);
    return (string) $p->getValue($m);
}

// plain is a phpredis connection for reads the mutex has no call for.
function plain(): Redis
{
    global $host, $port;
    $r = new Redis();
    check($r->connect($host, (int) $port, 5), "phpredis cannot connect to $host:$port");
    return $r;
}

function lifecycle(string $name): void
{
    $key = "lock_$name";
    $holder = mutex($name, 3);
    $result = $holder->synchronized(function () use ($name, $key, $holder) {
        $acquiredAt = microtime(true);
        emit('acquire', ['key' => $key, 'token' => token($holder), 'ttl_ms' => 4000]);
        $other = mutex($name, 1);
        $start = microtime(true);
        try {
            $other->synchronized(fn () => throw new CheckFailed('synchronized() ran its code while another holds the lock'));
            throw new CheckFailed('synchronized() of a held lock returned');
        } catch (TimeoutException $e) {
        }
        $waited = microtime(true) - $start;
        check($waited >= 0.9, sprintf('a second synchronized() with timeout 1 gave up after %.3fs', $waited));
        emit('refused', ['key' => $key, 'token' => token($other), 'holder' => token($holder), 'ttl_ms' => 4000,
            'age_ms' => (int) ((microtime(true) - $acquiredAt) * 1000)]);
        return 'ran';
    });
    check($result === 'ran', 'synchronized() did not return its code\'s result');
    emit('release', ['key' => $key, 'token' => token($holder)]);

    // The same mutex again, and a failure inside: the lock is released.
    try {
        $holder->synchronized(function () use ($key, $holder) {
            emit('acquire', ['key' => $key, 'token' => token($holder), 'ttl_ms' => 4000]);
            throw new DomainException('the code failed');
        });
        throw new CheckFailed('synchronized() swallowed its code\'s exception');
    } catch (DomainException $e) {
    }
    emit('release', ['key' => $key, 'token' => token($holder)]);
}

// notOwned: the holder's code runs past its lock's TTL; another client
// gets the lock meanwhile, and the late holder's synchronized() throws
// ExecutionOutsideLockException without touching the new holder's lock.
function notOwned(string $name): void
{
    $key = "lock_$name";
    $late = mutex($name, 1);
    try {
        $late->synchronized(function () use ($name, $key, $late) {
            emit('acquire', ['key' => $key, 'token' => token($late), 'ttl_ms' => 2000]);
            $r = plain();
            $deadline = microtime(true) + 6;
            while ($r->get($key) !== false) {
                check(microtime(true) < $deadline, 'a 2s lock was still held after 6s');
                usleep(50000);
            }
            emit('expired', ['key' => $key, 'token' => token($late)]);
            $next = mutex($name, 3);
            $next->synchronized(function () use ($key, $next) {
                emit('acquire', ['key' => $key, 'token' => token($next), 'ttl_ms' => 4000]);
            });
            emit('release', ['key' => $key, 'token' => token($next)]);
        });
        throw new CheckFailed('synchronized() returned for code that ran past the lock');
    } catch (ExecutionOutsideLockException $e) {
    }
}

// long: a lock of five minutes (a timeout of 299 s), as a scheduled job
// takes one.
function long(string $name): void
{
    $key = "lock_$name";
    $m = mutex($name, 299);
    $m->synchronized(function () use ($key, $m) {
        emit('acquire', ['key' => $key, 'token' => token($m), 'ttl_ms' => 300000]);
    });
    emit('release', ['key' => $key, 'token' => token($m)]);
}

$scenario = $opts['scenario'] ?? '';
$name = "$prefix:$scenario:" . bin2hex(random_bytes(8));
runScenario(function () use ($scenario, $name, $noLock, $opts, $client) {
    check(in_array($client, ['phpredis', 'predis'], true), "unknown client '$client'");
    check($client !== 'phpredis' || extension_loaded('redis'), 'the phpredis extension is not loaded');
    switch ($scenario) {
        case 'lifecycle':
            lifecycle($name);
            break;
        case 'not-owned':
            notOwned($name);
            break;
        case 'long':
            long($name);
            break;
        case 'contention':
            contention("lock_$name", (int) ($opts['workers'] ?? 4), (int) ($opts['rounds'] ?? 12), function () use ($name, $noLock) {
                $m = mutex($name, 10);
                return function (callable $increment) use ($m, $noLock) {
                    if ($noLock) {
                        $increment();
                    } else {
                        $m->synchronized($increment);
                    }
                };
            });
            break;
        default:
            throw new CheckFailed("unknown scenario '$scenario'");
    }
});
