<?php
// Laravel's cache lock (Cache::lock on the redis store: Debian's
// php-illuminate-cache and php-illuminate-redis over the phpredis
// extension), unchanged, against one Redis address (a lone Redis, or
// redlock-proxy in front of several masters).
//
// Runs one scenario and checks every result the library returns. After
// each step that changes what the server holds it prints one JSON line on
// stdout (the trace) and, with --wait-ack, waits for a line on stdin, so
// that a caller can check each master while the lock is in that state. The
// last line is {"step": "done"} and the exit status 0; on a failed check or
// an error the last line is {"step": "error", ...} and the exit status 1.
//
//   php laravel_lock.php --addr 127.0.0.1:6379 --scenario lifecycle

require_once 'Illuminate/Cache/autoload.php';
require_once 'Illuminate/Redis/autoload.php';
require_once __DIR__ . '/lockprog.php';

use Illuminate\Cache\RedisStore;
use Illuminate\Contracts\Cache\LockTimeoutException;
use Illuminate\Redis\RedisManager;

$opts = getopt('', ['addr:', 'scenario:', 'prefix:', 'wait-ack', 'workers:', 'rounds:', 'no-lock']);
$waitAck = isset($opts['wait-ack']);
$noLock = isset($opts['no-lock']);
$prefix = $opts['prefix'] ?? 'laravel';
[$host, $port] = explode(':', $opts['addr'] ?? '') + [1 => ''];

// store returns a fresh cache store on its own connection (a forked child
// must not share its parent's socket).
function store(): RedisStore
{
    global $host, $port;
    $manager = new RedisManager(null, 'phpredis', [
        'default' => ['host' => $host, 'port' => (int) $port, 'database' => 0, 'timeout' => 5, 'read_timeout' => 10],
    ]);
    return new RedisStore($manager, '', 'default');
}

function lifecycle(string $name): void
{
    $store = store();
    $lock = $store->lock($name, 10);
    check($lock->get() === true, 'get() of a free lock returned false');
    $acquiredAt = microtime(true);
    emit('acquire', ['key' => $name, 'token' => $lock->owner(), 'ttl_ms' => 10000]);
    $age = fn () => (int) ((microtime(true) - $acquiredAt) * 1000);

    $other = $store->lock($name, 10);
    check($other->get() === false, 'get() of a held lock returned true');
    $start = microtime(true);
    try {
        // block() counts whole seconds: block(2) waits more than one.
        $other->betweenBlockedAttemptsSleepFor(50)->block(2);
        throw new CheckFailed('block(2) got a held lock');
    } catch (LockTimeoutException $e) {
    }
    $waited = microtime(true) - $start;
    check($waited >= 0.95, sprintf('block(2) gave up after %.3fs', $waited));
    check($other->get(fn () => 'ran') === false, 'get(callback) ran the callback without the lock');
    emit('refused', ['key' => $name, 'token' => $other->owner(), 'holder' => $lock->owner(), 'ttl_ms' => 10000, 'age_ms' => $age()]);

    check($other->release() === false, 'release() by a client that does not hold it returned true');
    emit('not-owner', ['key' => $name, 'token' => $lock->owner(), 'other' => $other->owner(), 'ttl_ms' => 10000, 'age_ms' => $age()]);

    // Another process releases it by owner (restoreLock).
    $restored = store()->restoreLock($name, $lock->owner());
    check($restored->release() === true, 'release() of a restored lock returned false');
    emit('release', ['key' => $name, 'token' => $lock->owner()]);
    check($lock->release() === false, 'a second release() returned true');

    $result = $other->get(function () use ($name, $other) {
        emit('acquire', ['key' => $name, 'token' => $other->owner(), 'ttl_ms' => 10000]);
        return 'ran';
    });
    check($result === 'ran', 'get(callback) of a free lock did not run the callback');
    emit('release', ['key' => $name, 'token' => $other->owner()]);

    $forced = $store->lock($name, 10);
    check($forced->get() === true, 'get() of a free lock returned false');
    emit('acquire', ['key' => $name, 'token' => $forced->owner(), 'ttl_ms' => 10000]);
    $store->lock($name)->forceRelease();
    emit('release', ['key' => $name, 'token' => $forced->owner()]);
}

function notOwned(string $name): void
{
    $store = store();
    $lock = $store->lock($name, 1);
    check($lock->get() === true, 'get() of a free lock returned false');
    emit('acquire', ['key' => $name, 'token' => $lock->owner(), 'ttl_ms' => 1000]);
    $deadline = microtime(true) + 5;
    while (store()->lock($name, 1)->get() === false) {
        check(microtime(true) < $deadline, 'a 1s lock was still held after 5s');
        usleep(50000);
    }
    // The probe that got it holds it now; let it go and take it again.
    $store->lock($name)->forceRelease();
    emit('expired', ['key' => $name, 'token' => $lock->owner()]);

    $next = $store->lock($name, 10);
    check($next->get() === true, 'get() after expiry returned false');
    emit('acquire', ['key' => $name, 'token' => $next->owner(), 'ttl_ms' => 10000]);
    check($lock->release() === false, 'release() by the expired holder returned true');
    emit('not-owner', ['key' => $name, 'token' => $next->owner(), 'other' => $lock->owner(), 'ttl_ms' => 10000]);
    check($next->release() === true, 'release() by the holder returned false');
    emit('release', ['key' => $name, 'token' => $next->owner()]);
}

// long: a five-minute lock, as a scheduler takes one, refused to another
// client, then released.
function long(string $name): void
{
    $store = store();
    $lock = $store->lock($name, 300);
    check($lock->get() === true, 'get() of a free lock for 300 s returned false');
    emit('acquire', ['key' => $name, 'token' => $lock->owner(), 'ttl_ms' => 300000]);
    $other = store()->lock($name, 300);
    check($other->get() === false, 'get() of a held lock returned true');
    emit('refused', ['key' => $name, 'token' => $other->owner(), 'holder' => $lock->owner(), 'ttl_ms' => 300000, 'age_ms' => 1000]);
    check($lock->release() === true, 'release() by the holder returned false');
    emit('release', ['key' => $name, 'token' => $lock->owner()]);
}

// noExpiry: Cache::lock($name) without seconds takes the lock with SETNX,
// which never expires. One Redis grants it; the proxy refuses SETNX with
// its reason, which phpredis keeps as the connection's last error while
// get() returns false, as if another client held the lock.
function noExpiry(string $name): void
{
    $store = store();
    $lock = $store->lock($name);
    $client = $store->connection()->client();
    $client->clearLastError();
    if ($lock->get() === true) {
        emit('no-expiry', ['key' => $name, 'token' => $lock->owner()]);
        check($lock->release() === true, 'release() of the lock without expiry returned false');
        emit('release', ['key' => $name, 'token' => $lock->owner()]);
        return;
    }
    $error = (string) $client->getLastError();
    check($error !== '', 'get() without seconds returned false with no error: the lock is free');
    emit('refused-no-expiry', ['key' => $name, 'error' => $error]);
    check($lock->release() === false, 'release() of a refused lock returned true');
    emit('release', ['key' => $name, 'token' => $lock->owner()]);
}

// handoff: a forked process blocks in block() while this one holds the
// lock, and gets it once this one releases.
function handoffScenario(string $name): void
{
    $lock = store()->lock($name, 10);
    check($lock->get() === true, 'get() of a free lock returned false');
    emit('acquire', ['key' => $name, 'token' => $lock->owner(), 'ttl_ms' => 10000]);
    $owner = handoff(function () use ($name) {
        $mine = store()->lock($name, 10);
        $mine->betweenBlockedAttemptsSleepFor(20)->block(20);
        return [$mine->owner(), function () use ($mine) { return $mine->release(); }];
    }, function () use ($lock) {
        check($lock->release() === true, 'release() by the holder returned false');
    }, 10, function (string $owner) use ($name, $lock) {
        emit('handoff', ['key' => $name, 'token' => $owner, 'other' => $lock->owner(), 'ttl_ms' => 10000]);
    });
    emit('release', ['key' => $name, 'token' => $owner]);
}

$scenario = $opts['scenario'] ?? '';
$name = "$prefix:$scenario:" . bin2hex(random_bytes(8));
runScenario(function () use ($scenario, $name, $noLock, $opts) {
    check(extension_loaded('redis'), 'the phpredis extension is not loaded');
    switch ($scenario) {
        case 'lifecycle':
            lifecycle($name);
            break;
        case 'not-owned':
            notOwned($name);
            break;
        case 'handoff':
            handoffScenario($name);
            break;
        case 'long':
            long($name);
            break;
        case 'no-expiry':
            noExpiry($name);
            break;
        case 'contention':
            contention($name, (int) ($opts['workers'] ?? 4), (int) ($opts['rounds'] ?? 12), function () use ($name, $noLock) {
                $store = store();
                return function (callable $increment) use ($store, $name, $noLock) {
                    if ($noLock) {
                        $increment();
                    } else {
                        $store->lock($name, 10)->betweenBlockedAttemptsSleepFor(5)->block(60, $increment);
                    }
                };
            });
            break;
        default:
            throw new CheckFailed("unknown scenario '$scenario'");
    }
});
