// node-redlock 4.2.0, node-redlock 5 (beta 2) and @sesamecare-oss/redlock
// 1.4, unchanged, with ioredis, pointed at redlock-proxy as their only
// "server". Every step is checked on the backends directly.
// Run by integration/node_test.go with LOCK_ADDR and MASTERS set (see
// masters.js).
'use strict';

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const Redlock4 = require('redlock');
const Redlock5 = require('redlock5').default;
const { Redlock: SesameRedlock } = require('@sesamecare-oss/redlock');

const {
  direct, ioClient, closeAll, sleep, key, assertHeld, assertGone, minPTTL,
} = require('./masters');

after(closeAll);

test('node-redlock 4.2.0: multi-key lock, refusal, extend, unlock', async () => {
  const redlock = new Redlock4([ioClient()], { retryCount: 0 });
  const keys = [key('r4a'), key('r4b'), key('r4c')];
  const lock = await redlock.lock(keys, 2000);
  await assertHeld('after lock', keys, lock.value);

  // Another lock on an overlapping set is refused and leaves nothing.
  const overlap = [key('r4free'), keys[1]];
  await assert.rejects(redlock.lock(overlap, 2000), (e) => e.name === 'LockError');
  for (const d of direct) assert.equal(await d.exists(overlap[0]), 0, 'the refused multi-key lock left a key behind');
  await assertHeld('after the refused lock', keys, lock.value);

  const extended = await lock.extend(10000);
  for (const k of keys) {
    const deadline = Date.now() + 2000;
    while ((await minPTTL(k)) < 9000 && Date.now() < deadline) await sleep(10);
    assert.ok((await minPTTL(k)) > 9000, `after extend ${k} PTTL ${await minPTTL(k)}; want about 10s`);
  }

  await extended.unlock();
  await assertGone('after unlock', keys, lock.value);
  await assert.rejects(extended.unlock(), (e) => e.name === 'LockError');
});

for (const [name, make, db] of [
  ['node-redlock 5.0.0-beta.2', (c) => new Redlock5([c], { retryCount: 0 }), false],
  ['@sesamecare-oss/redlock 1.4.0', (c) => new SesameRedlock([c], { retryCount: 0 }), true],
]) {
  test(`${name}: multi-key acquire, refusal, extend, release`, async () => {
    const redlock = make(ioClient());
    const keys = [key('a'), key('b')];
    const lock = await redlock.acquire(keys, 2000);
    await assertHeld('after acquire', keys, lock.value);

    const other = [key('free'), keys[0]];
    await assert.rejects(redlock.acquire(other, 2000));
    for (const d of direct) assert.equal(await d.exists(other[0]), 0, 'the refused acquire left a key behind');
    await assertHeld('after the refused acquire', keys, lock.value);

    const extended = await lock.extend(10000);
    assert.ok(extended.expiration > Date.now() + 9000);
    for (const k of keys) {
      const deadline = Date.now() + 2000;
      while ((await minPTTL(k)) < 9000 && Date.now() < deadline) await sleep(10);
      assert.ok((await minPTTL(k)) > 9000, `after extend ${k} PTTL; want about 10s`);
    }

    await extended.release();
    await assertGone('after release', keys, lock.value);
    // Releasing again fails: no majority held it.
    await assert.rejects(extended.release());
  });

  test(`${name}: using() keeps extending while the routine runs`, async () => {
    const redlock = make(ioClient());
    const keys = [key('using1'), key('using2')];
    let value;
    let extensionsSeen = 0;
    const result = await redlock.using(keys, 1000, { automaticExtensionThreshold: 400 }, async (signal) => {
      // Wait well past the initial 1s TTL: only extensions keep it held.
      for (let i = 0; i < 25; i++) {
        await sleep(100);
        if (signal.aborted) throw signal.error;
      }
      value = (await direct[0].get(keys[0])) || (await direct[1].get(keys[0]));
      await assertHeld('inside using() after 2.5s', keys, value);
      extensionsSeen = 1;
      return 'done';
    });
    assert.equal(result, 'done');
    assert.equal(extensionsSeen, 1);
    await assertGone('after using()', keys, value);
  });
}

test('node-redlock 4.2.0 and 5: FENCE with the lock value gives successive holders increasing numbers', async () => {
  const client = ioClient();
  const k = key('fence');
  let last = 0;
  for (const redlock of [new Redlock4([client], { retryCount: 0 }), new Redlock5([client], { retryCount: 0 })]) {
    for (let i = 0; i < 2; i++) {
      const lock = redlock.lock ? await redlock.lock(k, 5000) : await redlock.acquire([k], 5000);
      const n = Number(await client.call('FENCE', k, lock.value));
      assert.ok(n > last, `holder ${i}: fencing number ${n} is not above ${last}`);
      assert.equal(Number(await client.call('FENCE', k, lock.value)), n, 'a second FENCE of the same lock changed its number');
      last = n;
      await (lock.release ? lock.release() : lock.unlock());
    }
  }
});
