// redis-semaphore's Semaphore (a counting semaphore: a sorted set of
// holders with a limit), unchanged, pointed at LOCK_ADDR: a lone Redis, or
// redlock-proxy in front of several masters. Every step is checked on the
// masters directly: on a lone Redis its sorted set, through the proxy the
// permits each master holds (a hash beside the key whose fields are the
// holders, each with its slot; a holder holds a permit when a majority of
// masters hold the same slot for it).
// Through the proxy, the library's own client-side RedlockSemaphore is
// also run directly over three of the masters, to show what a plain
// majority does: three holders of a limit-2 semaphore.
// Run by integration/node_test.go.
'use strict';

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { Semaphore, RedlockSemaphore, TimeoutError, LostLockError } = require('redis-semaphore');

const { lockAddr, masterAddrs, direct, ioClient, closeAll, sleep, key } = require('./masters');

after(closeAll);

const lone = masterAddrs.length === 1 && masterAddrs[0] === lockAddr;
const majority = Math.floor(masterAddrs.length / 2) + 1;

// Redis Cluster's hash slot (CRC16-XMODEM of the key or its hash tag) and
// the proxy's name for the hash of a semaphore's permits: the prefix, the
// shortest tag of the key's slot in braces, then the key.
function crc16(s) {
  let crc = 0;
  for (const b of Buffer.from(s)) {
    crc ^= b << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}
function slotOf(k) {
  const i = k.indexOf('{');
  if (i >= 0) {
    const j = k.indexOf('}', i + 1);
    if (j > i + 1) return crc16(k.slice(i + 1, j)) & 16383;
  }
  return crc16(k) & 16383;
}
const alphabet = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
function tagOf(slot) {
  const walk = (prefix, n) => {
    if (n === 0) return (crc16(prefix) & 16383) === slot ? prefix : null;
    for (const c of alphabet) {
      const t = walk(prefix + c, n - 1);
      if (t !== null) return t;
    }
    return null;
  };
  for (let n = 1; n <= 4; n++) {
    const t = walk('', n);
    if (t !== null) return t;
  }
  throw new Error(`no tag for slot ${slot}`);
}
const permitsKey = (k) => `redlock-proxy:sem:{${tagOf(slotOf(k))}}${k}`;

// holders returns the tokens holding a permit of the semaphore at k (the
// library's key), read from the masters.
async function holders(k) {
  if (lone) return new Set(await direct[0].zrange(k, 0, -1));
  const votes = new Map(); // token -> slot -> masters
  const now = Date.now();
  for (const d of direct) {
    const all = await d.hgetall(permitsKey(k));
    for (const [tok, v] of Object.entries(all)) {
      const [slot, deadline] = v.split(':');
      if (Number(deadline) <= now) continue;
      const bySlot = votes.get(tok) || new Map();
      bySlot.set(slot, (bySlot.get(slot) || 0) + 1);
      votes.set(tok, bySlot);
    }
  }
  const out = new Set();
  for (const [tok, bySlot] of votes) for (const n of bySlot.values()) if (n >= majority) out.add(tok);
  return out;
}

// leftOn returns, per master, the ms left of tok's permit (-1: none).
async function leftOn(k, tok) {
  if (lone) return [await direct[0].pttl(k)];
  const out = [];
  for (const d of direct) {
    const v = await d.hget(permitsKey(k), tok);
    out.push(v === null ? -1 : Number(v.split(':')[1]) - Date.now());
  }
  return out;
}

async function assertHolders(step, k, want) {
  // A command is answered once a majority did it: stragglers may land a
  // little later.
  const deadline = Date.now() + 3000;
  for (;;) {
    const got = [...(await holders(k))].sort();
    if (JSON.stringify(got) === JSON.stringify([...want].sort())) return;
    if (Date.now() > deadline) assert.deepEqual(got, [...want].sort(), `${step}: holders`);
    await sleep(20);
  }
}

const opts = (o) => ({ lockTimeout: 5000, acquireTimeout: 300, retryInterval: 20, refreshInterval: 0, ...o });

test('redis-semaphore 5.8.0 Semaphore: a limit of 2 admits two, refuses a third, and lets it in after a release', async () => {
  const c = ioClient();
  const name = key('sema');
  const k = `semaphore:${name}`;
  const a = new Semaphore(c, name, 2, opts());
  const b = new Semaphore(c, name, 2, opts());
  const third = new Semaphore(c, name, 2, opts());
  await a.acquire();
  await assertHolders('after a', k, [a.identifier]);
  for (const left of await leftOn(k, a.identifier)) {
    if (lone || left >= 0) assert.ok(left > 3000 && left <= 5000, `a's permit has ${left} ms left; want about 5000`);
  }
  await b.acquire();
  await assertHolders('after b', k, [a.identifier, b.identifier]);
  assert.equal(await third.tryAcquire(), false);
  await assert.rejects(third.acquire(), TimeoutError);
  await assertHolders('after the third was refused', k, [a.identifier, b.identifier]);

  await a.release();
  await assertHolders('after a released', k, [b.identifier]);
  await third.acquire();
  await assertHolders('after the third came in', k, [b.identifier, third.identifier]);
  await b.release();
  await third.release();
  await assertHolders('after every release', k, []);
});

test('redis-semaphore 5.8.0 Semaphore: refresh keeps permits past lockTimeout while a third waits; a lost permit is reported', async () => {
  const c = ioClient();
  const name = key('semrefresh');
  const k = `semaphore:${name}`;
  const lost = [];
  const held = [0, 1].map(() => new Semaphore(c, name, 2, { lockTimeout: 1000, refreshInterval: 200, onLockLost: (e) => lost.push(e) }));
  for (const s of held) await s.acquire();
  const waiter = new Semaphore(c, name, 2, opts({ acquireTimeout: 2500 }));
  // 2.5 s of tries, past the 1 s timeout.
  const got = await waiter.acquire().then(() => 'admitted', (e) => e);
  assert.ok(got instanceof TimeoutError, `the waiter: ${got}; lost: ${lost.map(String)}; holders: ${[...(await holders(k))]}`);
  assert.deepEqual(lost, []);
  await assertHolders('2.5 s into 1 s permits', k, held.map((s) => s.identifier));

  // Taken away behind their backs (DEL: the operator's force-release):
  // the next refresh finds each permit gone.
  await c.del(k);
  const deadline = Date.now() + 3000;
  while (lost.length < 2 && Date.now() < deadline) await sleep(20);
  assert.equal(lost.length, 2, 'onLockLost was not called for both');
  assert.ok(lost.every((e) => e instanceof LostLockError));
  await assertHolders('after the force-release', k, []);
  await waiter.acquire();
  await assertHolders('after the waiter came in', k, [waiter.identifier]);
  await waiter.release();
});

// contend runs workers that each enter rounds times under withPermit, and
// returns the most that were ever inside at once.
async function contend(workers, rounds, withPermit) {
  let inside = 0;
  let most = 0;
  const enter = async () => {
    inside++;
    most = Math.max(most, inside);
    await sleep(15);
    inside--;
  };
  await Promise.all(Array.from({ length: workers }, async () => {
    for (let r = 0; r < rounds; r++) await withPermit(enter);
  }));
  return most;
}

test('contention check: without a semaphore, more than 3 are inside at once', async () => {
  assert.ok((await contend(8, 5, (fn) => fn())) > 3, 'the contention check sees nothing without a semaphore');
});

test('redis-semaphore 5.8.0 Semaphore: eight workers, a limit of 3, never more than 3 inside', async () => {
  const c = ioClient();
  const name = key('semcontend');
  const most = await contend(8, 10, async (fn) => {
    const s = new Semaphore(c, name, 3, { lockTimeout: 5000, acquireTimeout: 60000, retryInterval: 5, refreshInterval: 0 });
    await s.acquire();
    try { await fn(); } finally { await s.release(); }
  });
  assert.ok(most <= 3, `${most} workers were inside a limit-3 semaphore at once`);
  assert.ok(most >= 2, `never more than ${most} inside: the semaphore let only one in at a time`);
  await assertHolders('after contention', `semaphore:${name}`, []);
});

if (!lone) {
  // Not through the proxy: the library's own multi-master semaphore, over
  // three of the masters directly. Each client misses one master (a
  // connection to an address where nothing listens, as a partition or a
  // dead master looks), a different one for each; the third finds the
  // middle master full, and the other two admit it. Each client then holds
  // two of three masters: three holders of a limit-2 semaphore. The proxy's
  // slots refuse that third client (TestSemaphoreThreeClientsEachRefusedByOneMaster).
  test('redis-semaphore 5.8.0 RedlockSemaphore over three masters directly: three holders of a limit-2 semaphore', async () => {
    const [m0, m1, m2] = masterAddrs.slice(0, 3).map((a) => ioClient(a));
    const dead = new Redis({ host: '127.0.0.1', port: 1, lazyConnect: true, enableOfflineQueue: false, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    dead.on('error', () => {});
    const name = key('redlocksem');
    const k = `semaphore:${name}`;
    const o = { lockTimeout: 10000, acquireAttemptsLimit: 1, refreshInterval: 0 };
    const first = new RedlockSemaphore([m0, m1, dead], name, 2, o);
    const second = new RedlockSemaphore([dead, m1, m2], name, 2, o);
    const third = new RedlockSemaphore([m0, m1, m2], name, 2, o);
    assert.equal(await first.tryAcquire(), true);
    assert.equal(await second.tryAcquire(), true);
    assert.equal(await third.tryAcquire(), true, 'the third client was refused: the demonstration no longer shows the flaw');
    const on = [];
    for (const s of [first, second, third]) {
      let n = 0;
      for (const m of [m0, m1, m2]) if ((await m.zscore(k, s.identifier)) !== null) n++;
      on.push(n);
    }
    assert.deepEqual(on, [2, 2, 2], 'each client holds two of the three masters');
    for (const s of [first, second, third]) await s.release();
    dead.disconnect();
  });
}
