// Attack class (holds): the manifest log in hostile hands. A context's manifest is a base plus one sealed
// record per later version (src/tiers/cold/manifest-log.ts). An attacker who can write the store but
// holds no master key drops a record from the middle or the end of the chain, swaps two records, replays
// another context's record or one of an earlier life of the same context, or copies a record to the next
// number. A worker resuming the victim must refuse with INTEGRITY (or the rollback error, when the chain
// is only cut short) before any page is read, and resume it byte for byte once the store is whole again.
// On a real S3 server (SeaweedFS) and on the POSIX blob store.
import { promises as fsp } from 'node:fs';

import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import type { BlobStore } from '../../../src/blob-store/blob-store';
import { PosixBlobStore } from '../../../src/blob-store/posix/posix-blob-store';
import { contextKeyPath, MANIFEST_LOG_PREFIX } from '../../../src/tiers/cold/cold-blob-keys';
import { expectSameBytes, tokenBytes } from '../../fabric/implementations';
import { startSeaweedfs, type SeaweedfsServer } from '../../support/seaweedfs';
import { expectCode, tempDir } from '../../tiers/cold/helpers';
import { openSharedTierWorker, type SharedTierWorker } from '../../tiers/fixtures/shared-tier';

const key = Buffer.alloc(32, 7);
/** The victim's tokens: a first durable copy of FIRST tokens, then TURNS turns of TURN tokens, one record each. */
const FIRST = 96;
const TURN = 4;
const TURNS = 3;
const victimBytes = tokenBytes(FIRST + TURN * TURNS, 5);
const neighbourBytes = tokenBytes(FIRST + TURN * TURNS, 6);

const recordPrefix = (contextId: string) => `${MANIFEST_LOG_PREFIX}${contextKeyPath(contextId)}/`;
const recordKey = (contextId: string, sequence: number) => `${recordPrefix(contextId)}${String(sequence).padStart(16, '0')}.rec`;

interface Backend {
  name: string;
  open(): Promise<{ store: BlobStore; close(): Promise<void> }>;
}

let server: SeaweedfsServer | undefined;
const backends: Backend[] = [
  {
    name: 'an S3 bucket',
    async open() {
      server = await startSeaweedfs();
      const store = server.store({ prefix: 'log/' });
      return {
        store,
        close: async () => {
          await store.close();
          await server?.close();
        },
      };
    },
  },
  {
    name: 'a POSIX blob store',
    async open() {
      const root = tempDir('log-attack');
      const store = await PosixBlobStore.open(root);
      return {
        store,
        close: async () => {
          await store.close();
          await fsp.rm(root, { recursive: true, force: true });
        },
      };
    },
  },
];

describe.each(backends)('an attacker who can write $name but holds no key, on the manifest log', (backend) => {
  let store: BlobStore;
  let closeStore: () => Promise<void>;
  const workers: SharedTierWorker[] = [];
  let pristine: Map<string, Buffer>;
  /** Record 2 of the victim's earlier life (deleted, then created again under the same id). */
  let earlierRecord2: Buffer;
  const version = 1 + TURNS;

  async function openWorker(): Promise<SharedTierWorker> {
    const worker = await openSharedTierWorker(store, key, { blockCount: 64 });
    workers.push(worker);
    return worker;
  }

  /** Writes `name`'s base (FIRST tokens) and one record per turn. */
  async function build(worker: SharedTierWorker, name: string, bytes: Uint8Array): Promise<void> {
    worker.memory.create(name, 1);
    await worker.memory.append(name, bytes.subarray(0, FIRST * 8));
    await worker.memory.spill(name);
    for (let turn = 0; turn < TURNS; turn++) {
      const at = (FIRST + turn * TURN) * 8;
      await worker.memory.append(name, bytes.subarray(at, at + TURN * 8));
      await worker.memory.spill(name);
    }
  }

  async function objects(): Promise<Map<string, Buffer>> {
    const all = new Map<string, Buffer>();
    for (const head of await store.list('')) all.set(head.key, (await store.get(head.key))!.bytes);
    return all;
  }

  /** A fresh worker resumes the victim as its workflow would: adopt at the version it knows, then read. */
  async function resumeVictim(): Promise<{ worker: SharedTierWorker; read: Promise<Uint8Array> }> {
    const worker = await openWorker();
    const read = (async () => {
      await worker.memory.recover('victim', { expectedTenant: 1, minVersion: version });
      await worker.memory.promote('victim');
      return worker.memory.read('victim', 0, FIRST + TURN * TURNS);
    })();
    return { worker, read };
  }

  async function expectRefused(code: 'INTEGRITY', message: RegExp): Promise<void> {
    const { worker, read } = await resumeVictim();
    await expectCode(read, code, message);
    expect(worker.memory.has('victim')).toBe(false);
  }

  beforeAll(async () => {
    ({ store, close: closeStore } = await backend.open());
    const holder = await openWorker();
    // The victim's earlier life: written, then deleted with its manifest and log.
    await build(holder, 'victim', tokenBytes(FIRST + TURN * TURNS, 9));
    earlierRecord2 = (await store.get(recordKey('victim', 2)))!.bytes;
    await holder.memory.release('victim');
    expect(await store.list(recordPrefix('victim'))).toEqual([]);
    await build(holder, 'victim', victimBytes);
    await build(holder, 'neighbour', neighbourBytes);
    expect(holder.memory.durableVersion('victim')).toBe(version);
    expect((await store.list(recordPrefix('victim'))).map((head) => head.key)).toEqual([2, 3, 4].map((n) => recordKey('victim', n)));
    pristine = await objects();
  }, 120_000);
  afterAll(async () => {
    for (const worker of workers.splice(0)) await worker.close();
    await closeStore?.();
  });
  beforeEach(async () => {
    for (const head of await store.list('')) if (!pristine.has(head.key)) await store.delete(head.key);
    for (const [objectKey, bytes] of pristine) await store.put(objectKey, bytes);
  });

  it('(baseline) a fresh worker resumes the victim from the untouched store, base and records', async () => {
    const { read } = await resumeVictim();
    expectSameBytes(await read, victimBytes);
  });

  it('drops a record from the middle of the chain: INTEGRITY, nothing adopted', async () => {
    await store.delete(recordKey('victim', 3));
    await expectRefused('INTEGRITY', /misses record 3 before record 4 \(dropped\)/);
  });

  it('drops the newest record: the rollback error, nothing adopted', async () => {
    await store.delete(recordKey('victim', 4));
    await expectRefused('INTEGRITY', /older than the expected 4 \(stale or replayed\)/);
  });

  it('swaps two records: INTEGRITY, nothing adopted', async () => {
    await store.put(recordKey('victim', 3), pristine.get(recordKey('victim', 4))!);
    await store.put(recordKey('victim', 4), pristine.get(recordKey('victim', 3))!);
    await expectRefused('INTEGRITY', /record 3 failed authentication/);
  });

  it("replays another context's record in the victim's chain: INTEGRITY, nothing adopted", async () => {
    await store.put(recordKey('victim', 3), pristine.get(recordKey('neighbour', 3))!);
    await expectRefused('INTEGRITY', /record 3 failed authentication/);
  });

  it("replays a record of the victim's earlier life: INTEGRITY, nothing adopted", async () => {
    await store.put(recordKey('victim', 2), earlierRecord2);
    await expectRefused('INTEGRITY', /record 2 does not follow the record before it/);
  });

  it('copies the newest record to the next number: INTEGRITY, nothing adopted', async () => {
    await store.put(recordKey('victim', 5), pristine.get(recordKey('victim', 4))!);
    await expectRefused('INTEGRITY', /record 5 failed authentication/);
  });

  it('(afterwards) the store made whole again, the victim resumes byte for byte', async () => {
    const { read } = await resumeVictim();
    expectSameBytes(await read, victimBytes);
  });
});
