// What the masters behind a lock address hold, read from each master
// directly: the lone Redis itself, or every backend of the proxy.
// LOCK_ADDR is where the libraries connect; MASTERS the masters behind it
// (comma-separated; for a lone Redis, its own address).
'use strict';

const assert = require('node:assert/strict');
const Redis = require('ioredis');

const lockAddr = process.env.LOCK_ADDR;
const masterAddrs = (process.env.MASTERS || '').split(',').filter(Boolean);
assert.ok(lockAddr && masterAddrs.length > 0, 'LOCK_ADDR and MASTERS must be set');

function connect(addr) {
  const [host, port] = addr.split(':');
  return new Redis({ host, port: Number(port), maxRetriesPerRequest: 1, enableOfflineQueue: true });
}

const opened = [];
// ioClient returns an ioredis client to addr (the lock address by default),
// closed by closeAll.
function ioClient(addr = lockAddr) {
  const c = connect(addr);
  opened.push(c);
  return c;
}

const direct = masterAddrs.map((a) => ioClient(a));
const majority = Math.floor(masterAddrs.length / 2) + 1;

async function closeAll() {
  await Promise.all(opened.map((c) => c.quit().catch(() => c.disconnect())));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let seq = 0;
const key = (p) => `${p}:${process.pid}:${Date.now()}:${seq++}`;

async function holders(k, value) {
  let n = 0;
  for (const d of direct) if ((await d.get(k)) === value) n++;
  return n;
}

// Waits for the stragglers of a command answered once a majority did it.
async function eventuallyHolders(k, value, want) {
  const deadline = Date.now() + 3000;
  for (;;) {
    const n = await holders(k, value);
    if (n === want || Date.now() > deadline) return n;
    await sleep(10);
  }
}

async function assertHeld(step, keys, value) {
  for (const k of [].concat(keys)) {
    const n = await holders(k, value);
    assert.ok(n >= majority, `${step}: ${k} holds the token on ${n} masters; want a majority (${majority})`);
  }
}

async function assertGone(step, keys, value) {
  for (const k of [].concat(keys)) {
    const n = await eventuallyHolders(k, value, 0);
    assert.equal(n, 0, `${step}: ${k} still holds the token on ${n} masters`);
  }
}

// assertNoKey checks that no master has k at all (once stragglers landed).
async function assertNoKey(step, k) {
  const deadline = Date.now() + 3000;
  for (;;) {
    let n = 0;
    for (const d of direct) n += await d.exists(k);
    if (n === 0) return;
    assert.ok(Date.now() < deadline, `${step}: ${k} exists on ${n} masters`);
    await sleep(10);
  }
}

async function minPTTL(k) {
  let min = Infinity;
  for (const d of direct) min = Math.min(min, await d.pttl(k));
  return min;
}

// assertPTTL checks that every master holding value under k has a PTTL in
// (lo, hi], waiting for stragglers.
async function assertPTTL(step, k, value, lo, hi) {
  const deadline = Date.now() + 2000;
  for (;;) {
    const bad = [];
    for (const [i, d] of direct.entries()) {
      if ((await d.get(k)) !== value) continue;
      const p = await d.pttl(k);
      if (p <= lo || p > hi) bad.push(`master ${i}: ${p}`);
    }
    if (bad.length === 0) return;
    assert.ok(Date.now() < deadline, `${step}: PTTL of ${k} not in (${lo}, ${hi}]: ${bad.join(', ')}`);
    await sleep(10);
  }
}

// majorityValue returns the value a majority of masters hold under k, or
// null.
async function majorityValue(k) {
  const counts = new Map();
  for (const d of direct) {
    const v = await d.get(k);
    if (v !== null) counts.set(v, (counts.get(v) || 0) + 1);
  }
  for (const [v, n] of counts) if (n >= majority) return v;
  return null;
}

// settles reports whether p settles within ms.
async function settles(p, ms) {
  let done = false;
  p.then(() => { done = true; }, () => { done = true; });
  await sleep(ms);
  return done;
}

module.exports = {
  lockAddr, masterAddrs, direct, majority, ioClient, closeAll, sleep, key,
  holders, eventuallyHolders, assertHeld, assertGone, assertNoKey, minPTTL, assertPTTL, majorityValue, settles,
};
