<?php
// Symfony Lock (Debian's php-symfony-lock: LockFactory over RedisStore,
// with the phpredis extension), unchanged, against one Redis address (a
// lone Redis, or redlock-proxy in front of several masters). RedisStore
// keeps a lock as a sorted set of owners scored with their deadlines, a
// "__write__" member marking an exclusive (write) lock; one store gives
// exclusive and shared (read) locks.
//
// Runs one scenario and checks every result the library returns. After
// each step that changes what the server holds it prints one JSON line on
// stdout (the trace, with "shape": "owners" and the mode of the lock) and,
// with --wait-ack, waits for a line on stdin, so that a caller can check
// each master while the lock is in that state. The last line is
// {"step": "done"} and the exit status 0; on a failed check or an error
// the last line is {"step": "error", ...} and the exit status 1.
//
//   php symfony_lock.php --addr 127.0.0.1:6379 --scenario lifecycle

require_once 'Symfony/Component/Lock/autoload.php';
require_once __DIR__ . '/lockprog.php';

use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;
use Symfony\Component\Lock\Store\RedisStore;

$opts = getopt('', ['addr:', 'scenario:', 'prefix:', 'wait-ack', 'workers:', 'rounds:', 'no-lock']);
$waitAck = isset($opts['wait-ack']);
$noLock = isset($opts['no-lock']);
$prefix = $opts['prefix'] ?? 'symfony';
$traceFields = ['shape' => 'owners'];
[$host, $port] = explode(':', $opts['addr'] ?? '') + [1 => ''];

// factory returns a lock factory over a fresh connection (a forked child
// must not share its parent's socket). $ttl is the store's initial TTL in
// seconds; null leaves RedisStore's default (300).
function factory(?float $ttl = 10): LockFactory
{
    global $host, $port;
    $redis = new Redis();
    check($redis->connect($host, (int) $port, 5), "cannot connect to $host:$port");
    $redis->setOption(Redis::OPT_READ_TIMEOUT, 10);
    return new LockFactory($ttl === null ? new RedisStore($redis) : new RedisStore($redis, $ttl));
}

// A lock with its key, whose state holds the token RedisStore writes.
class Held
{
    public $lock;
    public $key;

    public function __construct(LockFactory $f, string $name, float $ttl)
    {
        $this->key = new Key($name);
        $this->lock = $f->createLockFromKey($this->key, $ttl, false);
    }

    public function token(): string
    {
        return $this->key->getState(RedisStore::class);
    }
}

function lifecycle(string $name): void
{
    $f = factory();
    $a = new Held($f, $name, 10);
    check($a->lock->acquire() === true, 'acquire() of a free lock returned false');
    check($a->lock->isAcquired() === true, 'isAcquired() of the held lock returned false');
    emit('acquire', ['key' => $name, 'token' => $a->token(), 'ttl_ms' => 10000, 'mode' => 'write']);

    $b = new Held(factory(), $name, 10);
    check($b->lock->acquire() === false, 'acquire() of a held lock returned true');
    check($b->lock->isAcquired() === false, 'isAcquired() of a lock another holds returned true');
    emit('refused', ['key' => $name, 'token' => $b->token(), 'holder' => $a->token(), 'ttl_ms' => 10000, 'age_ms' => 1000, 'mode' => 'write']);

    $a->lock->refresh(20);
    check($a->lock->isAcquired() === true, 'isAcquired() after refresh() returned false');
    emit('extend', ['key' => $name, 'token' => $a->token(), 'ttl_ms' => 20000, 'mode' => 'write']);

    $a->lock->release();
    check($a->lock->isAcquired() === false, 'isAcquired() after release() returned true');
    emit('release', ['key' => $name, 'token' => $a->token()]);

    check($b->lock->acquire() === true, 'acquire() after the release returned false');
    emit('acquire', ['key' => $name, 'token' => $b->token(), 'ttl_ms' => 10000, 'mode' => 'write']);
    $b->lock->release();
    emit('release', ['key' => $name, 'token' => $b->token()]);
}

// defaults: the store and the lock at Symfony's defaults (300 s each, the
// lock released when its object goes), refused to another, refreshed,
// released.
function defaults(string $name): void
{
    $key = new Key($name);
    $lock = factory(null)->createLockFromKey($key);
    check($lock->acquire() === true, 'acquire() of a free lock at the defaults returned false');
    $token = $key->getState(RedisStore::class);
    emit('acquire', ['key' => $name, 'token' => $token, 'ttl_ms' => 300000, 'mode' => 'write']);
    $other = new Key($name);
    check(factory(null)->createLockFromKey($other)->acquire() === false, 'acquire() of a held lock returned true');
    emit('refused', ['key' => $name, 'token' => $other->getState(RedisStore::class), 'holder' => $token, 'ttl_ms' => 300000, 'age_ms' => 1000, 'mode' => 'write']);
    $lock->refresh();
    check($lock->getRemainingLifetime() > 290, 'refresh() at the defaults left less than 290 s');
    emit('extend', ['key' => $name, 'token' => $token, 'ttl_ms' => 300000, 'mode' => 'write']);
    unset($lock); // autoRelease: released as the lock object goes
    emit('release', ['key' => $name, 'token' => $token]);
}

// expired: a lock of one second lapses; releasing it afterwards is quiet,
// and another client takes it.
function expired(string $name): void
{
    $a = new Held(factory(1), $name, 1);
    check($a->lock->acquire() === true, 'acquire() of a free lock returned false');
    emit('acquire', ['key' => $name, 'token' => $a->token(), 'ttl_ms' => 1000, 'mode' => 'write']);
    $deadline = microtime(true) + 5;
    while ($a->lock->isAcquired()) {
        check(microtime(true) < $deadline, 'a 1s lock was still held after 5s');
        usleep(50000);
    }
    emit('expired', ['key' => $name, 'token' => $a->token()]);
    $a->lock->release(); // no longer held: nothing to do, and nothing thrown
    $b = new Held(factory(), $name, 10);
    check($b->lock->acquire() === true, 'acquire() after expiry returned false');
    emit('acquire', ['key' => $name, 'token' => $b->token(), 'ttl_ms' => 10000, 'mode' => 'write']);
    check($a->lock->isAcquired() === false, 'the expired holder still reports the lock');
    emit('not-owner', ['key' => $name, 'token' => $b->token(), 'other' => $a->token(), 'ttl_ms' => 10000, 'mode' => 'write']);
    $b->lock->release();
    emit('release', ['key' => $name, 'token' => $b->token()]);
}

// handoff: a forked process blocks in acquire(true) while this one holds
// the lock, and gets it soon after this one releases.
function handoffScenario(string $name): void
{
    $a = new Held(factory(), $name, 10);
    check($a->lock->acquire() === true, 'acquire() of a free lock returned false');
    emit('acquire', ['key' => $name, 'token' => $a->token(), 'ttl_ms' => 10000, 'mode' => 'write']);
    $owner = handoff(function () use ($name) {
        $mine = new Held(factory(), $name, 10);
        $mine->lock->acquire(true);
        return [$mine->token(), function () use ($mine) { $mine->lock->release(); return true; }];
    }, function () use ($a) {
        $a->lock->release();
    }, 1.5, function (string $owner) use ($name, $a) {
        emit('handoff', ['key' => $name, 'token' => $owner, 'other' => $a->token(), 'ttl_ms' => 10000, 'mode' => 'write']);
    });
    emit('release', ['key' => $name, 'token' => $owner]);
}

// shared: readers together, a writer refused while they hold it, a reader
// refused while a writer holds it.
function shared(string $name): void
{
    $r1 = new Held(factory(), $name, 10);
    $r2 = new Held(factory(), $name, 10);
    check($r1->lock->acquireRead() === true, 'acquireRead() of a free lock returned false');
    emit('read', ['key' => $name, 'token' => $r1->token(), 'ttl_ms' => 10000]);
    check($r2->lock->acquireRead() === true, 'a second reader was refused');
    check($r1->lock->isAcquired() && $r2->lock->isAcquired(), 'isAcquired() of a reader returned false');
    emit('read', ['key' => $name, 'token' => $r2->token(), 'ttl_ms' => 10000]);
    emit('read', ['key' => $name, 'token' => $r1->token(), 'ttl_ms' => 10000, 'age_ms' => 1000]);

    $w = new Held(factory(), $name, 10);
    check($w->lock->acquire() === false, 'a writer got a read-locked lock');
    emit('refused', ['key' => $name, 'token' => $w->token(), 'holder' => $r2->token(), 'ttl_ms' => 10000, 'age_ms' => 1000, 'mode' => 'read']);

    $r1->lock->release();
    emit('release', ['key' => $name, 'token' => $r1->token()]);
    emit('read', ['key' => $name, 'token' => $r2->token(), 'ttl_ms' => 10000, 'age_ms' => 2000]);
    $r2->lock->release();
    emit('release', ['key' => $name, 'token' => $r2->token()]);

    check($w->lock->acquire() === true, 'the writer was refused a free lock');
    emit('acquire', ['key' => $name, 'token' => $w->token(), 'ttl_ms' => 10000, 'mode' => 'write']);
    $r3 = new Held(factory(), $name, 10);
    check($r3->lock->acquireRead() === false, 'a reader got a write-locked lock');
    emit('refused', ['key' => $name, 'token' => $r3->token(), 'holder' => $w->token(), 'ttl_ms' => 10000, 'age_ms' => 1000, 'mode' => 'write']);
    $w->lock->release();
    emit('release', ['key' => $name, 'token' => $w->token()]);
}

// promote: a lone reader becomes the writer; a reader beside another is
// refused the write lock and stays a reader; a writer that asks to read
// turns its lock shared.
function promote(string $name): void
{
    $r1 = new Held(factory(), $name, 10);
    check($r1->lock->acquireRead() === true, 'acquireRead() of a free lock returned false');
    emit('read', ['key' => $name, 'token' => $r1->token(), 'ttl_ms' => 10000]);
    check($r1->lock->acquire() === true, 'a lone reader was refused the write lock');
    emit('acquire', ['key' => $name, 'token' => $r1->token(), 'ttl_ms' => 10000, 'mode' => 'write']);

    check($r1->lock->acquireRead() === true, 'the writer was refused a read lock');
    emit('read', ['key' => $name, 'token' => $r1->token(), 'ttl_ms' => 10000]);
    $r2 = new Held(factory(), $name, 10);
    check($r2->lock->acquireRead() === true, 'a second reader was refused');
    emit('read', ['key' => $name, 'token' => $r2->token(), 'ttl_ms' => 10000]);
    check($r1->lock->acquire() === false, 'a reader beside another got the write lock');
    emit('read', ['key' => $name, 'token' => $r1->token(), 'ttl_ms' => 10000, 'age_ms' => 1000]);
    emit('read', ['key' => $name, 'token' => $r2->token(), 'ttl_ms' => 10000, 'age_ms' => 1000]);
    $r1->lock->release();
    $r2->lock->release();
    emit('release', ['key' => $name, 'token' => $r1->token()]);
    emit('release', ['key' => $name, 'token' => $r2->token()]);
}

$scenario = $opts['scenario'] ?? '';
$name = "$prefix:$scenario:" . bin2hex(random_bytes(8));
runScenario(function () use ($scenario, $name, $noLock, $opts) {
    check(extension_loaded('redis'), 'the phpredis extension is not loaded');
    switch ($scenario) {
        case 'lifecycle':
            lifecycle($name);
            break;
        case 'expired':
            expired($name);
            break;
        case 'defaults':
            defaults($name);
            break;
        case 'handoff':
            handoffScenario($name);
            break;
        case 'shared':
            shared($name);
            break;
        case 'promote':
            promote($name);
            break;
        case 'contention':
            contention($name, (int) ($opts['workers'] ?? 4), (int) ($opts['rounds'] ?? 10), function () use ($name, $noLock) {
                $f = factory();
                return function (callable $increment) use ($f, $name, $noLock) {
                    if ($noLock) {
                        $increment();
                        return;
                    }
                    $lock = $f->createLock($name, 10, false);
                    $lock->acquire(true);
                    try {
                        $increment();
                    } finally {
                        $lock->release();
                    }
                };
            });
            break;
        default:
            throw new CheckFailed("unknown scenario '$scenario'");
    }
});
