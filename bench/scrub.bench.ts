// What zeroing released frames costs: the two scrub policies side by side in one run, alternated round
// by round so that both see the same machine state. One tenant throughout, the worst case for 'always'
// (under 'on-tenant-change' no frame is ever zeroed, so its figures are the allocator without scrubbing).
//   npx tsx bench/scrub.bench.ts [--rounds 7] [--json build/bench/scrub.json]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { NativeAllocator, type PoolOptions, type ScrubPolicy } from '../src/fabric';
import { median, option, printTable } from './measure';

const rounds = Number(option('--rounds') ?? 7);
const jsonPath = option('--json');

// Llama-3-8B's shape (128 KiB per token, 2 MiB per block): the size of a frame decides what zeroing costs.
const shape = { layers: 32, kvHeads: 8, headDim: 128, dtypeBytes: 2 };
const BLOCKS = 256; // 512 MiB per pool; two pools live at once
const POLICIES: ScrubPolicy[] = ['on-tenant-change', 'always'];

interface Scenario {
  name: string;
  /** What one operation is, for the table. */
  unit: string;
  /** Operations per measurement. */
  operations: number;
  /** Runs `operations` operations on a warm pool; returns the seconds they took. */
  measure(pool: NativeAllocator): Promise<number>;
}

const seconds = (started: bigint) => Number(process.hrtime.bigint() - started) / 1e9;

/** A turn's KV appended to a fresh context of reused frames, then the context released. */
function turnCycle(tokens: number, operations: number): Scenario {
  return {
    name: `create, appendAsync ${tokens} tokens, release`,
    unit: 'turns',
    operations,
    async measure(pool) {
      const kv = new Uint8Array(tokens * pool.layout.bytesPerToken).fill(0x5a);
      const started = process.hrtime.bigint();
      for (let i = 0; i < operations; i++) {
        const ctx = pool.createContext(1);
        await pool.appendAsync(ctx, kv);
        pool.release(ctx);
      }
      return seconds(started);
    },
  };
}

/** release() alone of a context filling half the pool: where 'always' zeroes, on the calling thread. */
const bigRelease: Scenario = {
  name: `release a ${BLOCKS / 2}-block context (${BLOCKS} MiB)`,
  unit: 'releases',
  operations: 4,
  async measure(pool) {
    const kv = new Uint8Array((BLOCKS / 2) * pool.layout.blockBytes).fill(0x33);
    let total = 0;
    for (let i = 0; i < this.operations; i++) {
      const ctx = pool.createContext(1);
      await pool.appendAsync(ctx, kv);
      const started = process.hrtime.bigint();
      pool.release(ctx);
      total += seconds(started);
    }
    return total;
  },
};

/** Engine-managed blocks: allocate a batch and free it (the frames handed out were freed just before). */
const rawBatch: Scenario = {
  name: 'allocateBlocks 64 + freeBlocks',
  unit: 'batches',
  operations: 20,
  async measure(pool) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < this.operations; i++) pool.freeBlocks(pool.allocateBlocks(1, 64));
    return seconds(started);
  },
};

const scenarios: Scenario[] = [turnCycle(128, 20), turnCycle(1024, 6), bigRelease, rawBatch];

async function main() {
  const pools = Object.fromEntries(
    POLICIES.map((scrub) => {
      const options: PoolOptions = { shape, tokensPerBlock: 16, blockCount: BLOCKS, scrub, backend: 'cpu' };
      return [scrub, new NativeAllocator(options)];
    }),
  ) as Record<ScrubPolicy, NativeAllocator>;
  const results = [];
  for (const scenario of scenarios) {
    const samples: Record<ScrubPolicy, number[]> = { 'on-tenant-change': [], always: [] };
    // One warm-up each (first-touch page faults of the pool), then alternated rounds.
    for (const scrub of POLICIES) await scenario.measure(pools[scrub]);
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? POLICIES : [...POLICIES].reverse();
      for (const scrub of order) samples[scrub].push((await scenario.measure(pools[scrub])) / scenario.operations);
    }
    const plain = median(samples['on-tenant-change']);
    const always = median(samples.always);
    results.push({
      scenario: scenario.name,
      unit: scenario.unit,
      onTenantChangeMs: plain * 1e3,
      alwaysMs: always * 1e3,
      ratio: always / plain,
    });
  }
  for (const pool of Object.values(pools)) pool.close();

  console.log(`kvfabric scrub benchmark: ${os.cpus()[0]?.model ?? 'cpu'} x${os.cpus().length}, node ${process.version}`);
  console.log(`pool: ${BLOCKS} blocks of 2 MiB (Llama-3-8B shape), one tenant; median of ${rounds} alternated rounds\n`);
  printTable(
    ['operation', 'unit', 'on-tenant-change', 'always', 'always / on-tenant-change'],
    results.map((r) => [
      r.scenario,
      r.unit,
      `${r.onTenantChangeMs.toFixed(3)} ms`,
      `${r.alwaysMs.toFixed(3)} ms`,
      `${r.ratio.toFixed(2)}x`,
    ]),
  );
  if (jsonPath) {
    fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
    fs.writeFileSync(
      jsonPath,
      JSON.stringify({ machine: { cpu: os.cpus()[0]?.model, cores: os.cpus().length, node: process.version }, rounds, results }, null, 2),
    );
    console.log(`wrote ${jsonPath}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
