// Single-instance lock libraries from npm, unchanged, pointed at LOCK_ADDR
// (a lone Redis, or redlock-proxy in front of several masters): each one's
// acquire, refusal while held, extend or refresh, release, automatic
// extension where it has one, and contention with no lost update. Every
// step is checked on the masters directly (masters.js).
// Run by integration/node_test.go.
'use strict';

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { createClient } = require('redis');
const { createClient: createClient4 } = require('redis4');
const { Mutex, TimeoutError, LostLockError } = require('redis-semaphore');
const Warlock = require('node-redis-warlock');
const redisLock = require('redis-lock');
const simpleMutex = require('simple-redis-mutex');

const {
  lockAddr, masterAddrs, direct, ioClient, closeAll, sleep, key,
  assertHeld, assertGone, assertNoKey, assertPTTL, majorityValue, settles,
} = require('./masters');

const closers = [];
after(async () => {
  await Promise.all(closers.map((close) => close().catch(() => {})));
  await closeAll();
});

// nodeRedis connects a node-redis client (v5, or v4 with createClient4).
async function nodeRedis(create = createClient) {
  const c = create({ url: `redis://${lockAddr}` });
  c.on('error', () => {});
  await c.connect();
  closers.push(() => c.quit());
  return c;
}

// contend runs workers that each increment a shared counter rounds times
// inside withLock, with a pause between read and write, and checks that no
// update was lost and no two workers were ever inside at once.
async function contend(workers, rounds, withLock) {
  const shared = { counter: 0, inside: 0, overlap: 0 };
  const increment = async () => {
    shared.inside++;
    if (shared.inside > 1) shared.overlap++;
    const v = shared.counter;
    await sleep(2);
    shared.counter = v + 1;
    shared.inside--;
  };
  await Promise.all(Array.from({ length: workers }, async (_, w) => {
    for (let r = 0; r < rounds; r++) await withLock(increment, w);
  }));
  return { lost: workers * rounds - shared.counter, overlap: shared.overlap };
}

// Eight workers of thirty rounds: enough that a lock which lets two
// holders in now and then is caught on every run.
async function assertNoLostUpdate(withLock) {
  const { lost, overlap } = await contend(8, 30, withLock);
  assert.equal(lost, 0, `${lost} updates lost`);
  assert.equal(overlap, 0, `${overlap} entries overlapped another holder`);
}

test('contention check: without a lock, updates are lost', async () => {
  const { lost, overlap } = await contend(8, 30, (fn) => fn());
  assert.ok(lost > 0 && overlap > 0, 'the contention check sees nothing without a lock');
});

// ---- redis-semaphore (Mutex, on ioredis) ----

test('redis-semaphore 5.8.0 Mutex: acquire, refusal, re-take by identifier, release', async () => {
  const c = ioClient();
  const name = key('sem');
  const k = `mutex:${name}`;
  const m = new Mutex(c, name, { lockTimeout: 5000, acquireTimeout: 500, retryInterval: 20, refreshInterval: 0 });
  await m.acquire();
  assert.ok(m.isAcquired);
  await assertHeld('after acquire', k, m.identifier);
  await assertPTTL('after acquire', k, m.identifier, 3000, 5000);

  const other = new Mutex(c, name, { lockTimeout: 5000, acquireTimeout: 300, retryInterval: 20, refreshInterval: 0 });
  assert.equal(await other.tryAcquire(), false);
  await assert.rejects(other.acquire(), TimeoutError);
  await assertGone('after the refusals', k, other.identifier);
  await assertHeld('after the refusals', k, m.identifier);

  // An identifier acquired elsewhere is taken over by refreshing it.
  const again = new Mutex(c, name, { lockTimeout: 8000, identifier: m.identifier, acquiredExternally: true, refreshInterval: 0 });
  await again.acquire();
  await assertPTTL('after the re-take', k, m.identifier, 6000, 8000);
  const thief = new Mutex(c, name, { lockTimeout: 30000, identifier: 'not-the-holder', acquiredExternally: true, refreshInterval: 0 });
  await assert.rejects(thief.acquire(), TimeoutError);
  await assertHeld('after a wrong identifier', k, m.identifier);
  await assertPTTL('after a wrong identifier', k, m.identifier, 0, 8000);

  await m.release();
  assert.equal(m.isAcquired, false);
  await assertGone('after release', k, m.identifier);
});

test('redis-semaphore 5.8.0 Mutex: automatic refresh keeps it past its timeout; a lost lock is reported', async () => {
  const c = ioClient();
  const name = key('semrefresh');
  const k = `mutex:${name}`;
  const lost = [];
  const m = new Mutex(c, name, { lockTimeout: 1000, refreshInterval: 200, onLockLost: (e) => lost.push(e) });
  await m.acquire();
  await sleep(2500);
  assert.deepEqual(lost, []);
  await assertHeld('2.5s into a 1s lock', k, m.identifier);
  await m.release();
  await assertGone('after release', k, m.identifier);

  // Taken away behind its back: the next refresh finds it gone.
  const n = new Mutex(c, name, { lockTimeout: 1000, refreshInterval: 200, onLockLost: (e) => lost.push(e) });
  await n.acquire();
  await Promise.all(direct.map((d) => d.del(k)));
  const deadline = Date.now() + 3000;
  while (lost.length === 0 && Date.now() < deadline) await sleep(20);
  assert.equal(lost.length, 1, 'onLockLost was not called');
  assert.ok(lost[0] instanceof LostLockError);
  assert.equal(n.isAcquired, false);
  await assertNoKey('after the loss', k);
});

test('redis-semaphore 5.8.0 Mutex: contention loses no update', async () => {
  const c = ioClient();
  const name = key('semcontend');
  await assertNoLostUpdate(async (fn) => {
    const m = new Mutex(c, name, { lockTimeout: 5000, acquireTimeout: 60000, retryInterval: 5, refreshInterval: 0 });
    await m.acquire();
    try { await fn(); } finally { await m.release(); }
  });
  await assertNoKey('after contention', `mutex:${name}`);
});

// ---- node-redis-warlock (on ioredis) ----

function warlockLock(w, name, ttl) {
  return new Promise((resolve, reject) => w.lock(name, ttl, (err, unlock, id) => (err ? reject(err) : resolve({ unlock, id }))));
}
const callback = (fn) => new Promise((resolve, reject) => fn((err, res) => (err ? reject(err) : resolve(res))));

test('node-redis-warlock 1.0.2: lock, refusal, touch, unlock', async () => {
  const w = Warlock(ioClient());
  const name = key('warlock');
  const k = `${name}:lock`;
  const { unlock, id } = await warlockLock(w, name, 5000);
  assert.equal(typeof unlock, 'function');
  await assertHeld('after lock', k, id);
  await assertPTTL('after lock', k, id, 3000, 5000);

  const refused = await warlockLock(w, name, 5000);
  assert.equal(refused.unlock, false);
  assert.equal(await majorityValue(k), id, 'a refused lock changed the holder');

  assert.equal(await w.touch(name, id, 10000), 'OK');
  await assertPTTL('after touch', k, id, 8000, 10000);
  assert.equal(await w.touch(name, 'not-the-holder', 60000), 0);
  await assertPTTL('after a wrong id touched it', k, id, 0, 10000);
  assert.equal(await callback((cb) => w.unlock(name, 'not-the-holder', cb)), 0);
  await assertHeld('after a wrong id unlocked it', k, id);

  assert.equal(await callback(unlock), 1);
  await assertGone('after unlock', k, id);
  assert.equal(await callback(unlock), 0);
  assert.equal(await w.touch(name, id, 10000), 0, 'touch of a released lock');
  await assertNoKey('after touching a released lock', k);
});

test('node-redis-warlock 1.0.2: optimistic lock under contention loses no update', async () => {
  const w = Warlock(ioClient());
  const name = key('warlockcontend');
  await assertNoLostUpdate(async (fn) => {
    const unlock = await callback((cb) => w.optimistic(name, 5000, 100000, 5, cb));
    try { await fn(); } finally { assert.equal(await callback(unlock), 1); }
  });
  await assertNoKey('after contention', `${name}:lock`);
});

// ---- redis-lock (on node-redis 4) ----

test('redis-lock 1.0.0: lock, waiting while held, hand-off on release', async () => {
  const lock = redisLock(await nodeRedis(createClient4), 20);
  const name = key('redislock');
  const k = `lock.${name}`;
  const release = await lock(name, 5000);
  const held = await majorityValue(k);
  assert.ok(held, 'no value is held by a majority after lock');
  await assertPTTL('after lock', k, held, 3000, 5000);

  // A second lock keeps retrying while the first is held.
  const second = lock(name, 5000);
  assert.equal(await settles(second, 400), false, 'a second lock was granted while the first was held');
  assert.equal(await majorityValue(k), held, 'the waiting lock changed the holder');

  await release();
  const release2 = await Promise.race([second, sleep(3000).then(() => null)]);
  assert.ok(release2, 'the waiting lock was not granted within 3s of the release');
  const next = await majorityValue(k);
  assert.ok(next && next !== held, `after the hand-off the key holds ${next}`);
  await release2();
  await assertGone('after release', k, next);
});

test('redis-lock 1.0.0: contention loses no update', async () => {
  const lock = redisLock(await nodeRedis(createClient4), 5);
  const name = key('redislockcontend');
  await assertNoLostUpdate(async (fn) => {
    const release = await lock(name, 5000);
    try { await fn(); } finally { await release(); }
  });
  await assertNoKey('after contention', `lock.${name}`);
});

// ---- simple-redis-mutex (on node-redis 5) ----
//
// It cannot work through any proxy of N independent masters: it takes its
// fencing token with a plain INCR of a counter key, which no majority vote
// can make monotonic, and its release script PUBLISHes to wake waiters. So
// it runs against the lone Redis only, and through the proxy the refusal
// is checked to say so (the README lists it among the libraries that do
// not work, and why).

const throughProxy = !masterAddrs.includes(lockAddr);

if (throughProxy) {
  test('simple-redis-mutex 3.0.0: refused through the proxy, saying why (its INCR fencing counter)', async () => {
    const c = await nodeRedis();
    await assert.rejects(simpleMutex.tryLock(c, key('srm'), { timeout: 5000 }), /redlock-proxy: a counter has no majority meaning/);
  });
}

if (!throughProxy) test('simple-redis-mutex 3.0.0: tryLock, refusal, refreshTimeout, lock with failAfter, release, hand-off', async () => {
  const c = await nodeRedis();
  const name = key('srm');
  const k = `@simple-redis-mutex:lock-${name}`;
  const [ok, release] = await simpleMutex.tryLock(c, name, { timeout: 5000 });
  assert.equal(ok, true);
  assert.ok(release.fencingToken > 0, `fencing token ${release.fencingToken}`);
  const held = await majorityValue(k);
  assert.ok(held, 'no value is held by a majority after tryLock');
  await assertPTTL('after tryLock', k, held, 3000, 5000);

  const [ok2, dummy] = await simpleMutex.tryLock(c, name, { timeout: 5000 });
  assert.equal(ok2, false);
  assert.equal(dummy.fencingToken, -1);
  await assert.rejects(simpleMutex.lock(c, name, { timeout: 5000, pollingInterval: 100, failAfter: 400 }));
  assert.equal(await majorityValue(k), held, 'a refused attempt changed the holder');

  await sleep(1200);
  await assertPTTL('1.2s into a 5s lock', k, held, 0, 4000);
  await release.refreshTimeout();
  await assertPTTL('after refreshTimeout', k, held, 4000, 5000);

  const waiting = simpleMutex.lock(c, name, { timeout: 5000, pollingInterval: 100, failAfter: 5000 });
  assert.equal(await settles(waiting, 300), false, 'lock() was granted while held');
  await release();
  await assertGone('after release', k, held);
  const release2 = await waiting;
  assert.ok(release2.fencingToken > release.fencingToken, 'fencing tokens do not grow');
  const next = await majorityValue(k);
  assert.ok(next && next !== held, `after the hand-off the key holds ${next}`);
  await release2();
  await assertGone('after the second release', k, next);
});

if (!throughProxy) test('simple-redis-mutex 3.0.0: contention loses no update', async () => {
  const c = await nodeRedis();
  const name = key('srmcontend');
  await assertNoLostUpdate(async (fn) => {
    const release = await simpleMutex.lock(c, name, { timeout: 5000, pollingInterval: 20, failAfter: 60000 });
    try { await fn(); } finally { await release(); }
  });
  await assertNoKey('after contention', `@simple-redis-mutex:lock-${name}`);
});

// ---- @microfleet/ioredis-lock (ESM, on ioredis) ----

test('@microfleet/ioredis-lock 6.0.1: acquire, refusal, extend, release, extend after expiry', async () => {
  const { createLock, LockAcquisitionError, LockExtendError, LockReleaseError } = await import('@microfleet/ioredis-lock');
  const c = ioClient();
  const k = key('mf');
  const lock = createLock(c, { timeout: 5000, retries: 0, delay: 50 });
  await lock.acquire(k);
  const held = await majorityValue(k);
  assert.ok(held, 'no value is held by a majority after acquire');
  await assertPTTL('after acquire', k, held, 3000, 5000);

  const other = createLock(c, { timeout: 5000, retries: 2, delay: 50 });
  await assert.rejects(other.acquire(k), LockAcquisitionError);
  assert.equal(await majorityValue(k), held, 'a refused acquire changed the holder');

  await lock.extend(10000);
  await assertPTTL('after extend', k, held, 8000, 10000);
  await lock.release();
  await assertGone('after release', k, held);
  await assert.rejects(lock.release(), LockReleaseError);

  const short = createLock(c, { timeout: 300, retries: 0 });
  await short.acquire(k);
  await sleep(700);
  await assert.rejects(short.extend(10000), LockExtendError);
  await assertNoKey('after extending an expired lock', k);

  const late = createLock(c, { timeout: 300, retries: 0 });
  await late.acquire(k);
  await sleep(700);
  await assert.rejects(late.release(), LockReleaseError);
});

test('@microfleet/ioredis-lock 6.0.1: contention loses no update', async () => {
  const { createLock } = await import('@microfleet/ioredis-lock');
  const c = ioClient();
  const k = key('mfcontend');
  await assertNoLostUpdate(async (fn) => {
    const lock = createLock(c, { timeout: 5000, retries: 100000, delay: 5 });
    await lock.acquire(k);
    try { await fn(); } finally { await lock.release(); }
  });
  await assertNoKey('after contention', k);
});
