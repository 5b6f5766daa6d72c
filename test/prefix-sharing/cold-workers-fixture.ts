// Workers' tier layers on one cold directory or bucket (two pools, the real cold store, the tiny model's pages) and
// their cold prefixes: for the tests of prefixes found through the cold tier and the attacks on them.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { BlobStore } from '../../src/blob-store/blob-store';
import type { EngineFingerprint } from '../../src/engines/fingerprint';
import { NativeAllocator } from '../../src/fabric';
import { ColdPrefixes } from '../../src/prefix-sharing/cold-prefixes';
import { holderIdOf } from '../../src/prefix-sharing/prefix-names';
import { prefixKeys, TenantSalts } from '../../src/prefix-sharing/prefix-keys';
import { ColdStore, KeyRing } from '../../src/tiers/cold';
import { TieredMemory } from '../../src/tiers/tiered-memory';
import { tinyShape } from '../fabric/implementations';
import { TEST_KEY_RING } from '../shared-directory/fixtures/test-records';

export const TPB = 4;
export const FINGERPRINT: EngineFingerprint = {
  engine: 'test',
  version: '1',
  modelSha256: 'b'.repeat(64),
  flashAttention: false,
  kType: 'f16',
  vType: 'f16',
  shape: tinyShape,
  contextLength: 4096,
};
export const salts = new TenantSalts(new KeyRing([{ id: 'w', key: Buffer.alloc(32, 5) }], 'w'));
export const keysOf = (tokens: Uint32Array, tenant = 'acme') =>
  prefixKeys(tokens, { fingerprint: FINGERPRINT, salt: salts.of(tenant), tokensPerBlock: TPB });
export const noteOf = (tokens: Uint32Array) => ({ fingerprint: FINGERPRINT, tokens: Array.from(tokens) });

/** One worker's tier layer on the shared cold directory, and its cold prefixes. */
export interface ColdWorker {
  pool: NativeAllocator;
  tiers: TieredMemory;
  cold: ColdStore;
  prefixes: ColdPrefixes;
}

/**
 * `count` workers sharing one cold directory (`dir`), or one bucket (`store`, left open); close() closes
 * them and removes the directory.
 */
export async function openColdWorkers(
  count: number,
  store?: BlobStore,
): Promise<{ workers: ColdWorker[]; dir: string; close(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'kvfabric-cold-prefixes-'));
  const workers: ColdWorker[] = [];
  for (let i = 0; i < count; i++) {
    const pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: TPB, blockCount: 64, hostBlockCount: 64 });
    const cold = await ColdStore.open(store ? { store, keyRing: TEST_KEY_RING } : { directory: join(dir, 'cold'), keyRing: TEST_KEY_RING });
    const tiers = new TieredMemory({ pool, cold, deviceLowWatermark: 0, hostLowWatermark: 0 });
    workers.push({ pool, tiers, cold, prefixes: new ColdPrefixes({ tiers, cold, tokensPerBlock: TPB, fingerprint: FINGERPRINT, noteOf }) });
  }
  return {
    workers,
    dir,
    async close() {
      for (const worker of workers) {
        await worker.cold.close();
        worker.pool.close();
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A holder of `tokens` of `tenant` (allocator id; `tenantName` salts its keys) on `worker` with KV `kv`
 * (token-major), as PrefixSharing.publish leaves one, written to the cold tier. Returns its keys.
 */
export async function publishHolder(
  worker: ColdWorker,
  tokens: Uint32Array,
  kv: Uint8Array,
  tenant = 1,
  tenantName = 'acme',
): Promise<string[]> {
  const keys = keysOf(tokens, tenantName);
  const holderId = holderIdOf(keys[keys.length - 1]!);
  worker.tiers.create(holderId, tenant);
  await worker.tiers.append(holderId, kv, noteOf(tokens));
  await worker.prefixes.store(holderId, keys, tokens);
  return keys;
}
