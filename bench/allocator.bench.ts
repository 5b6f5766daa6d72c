// Allocator operations per second through the TypeScript API, native against pure TypeScript, measured
// side by side in one run. Target: >= 5 M block allocations+frees per second through batched
// calls on the native path, and faster than pure TypeScript.
//   npm run bench -- [--seconds 1] [--json build/bench/allocator.json]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { computeLayout, NativeAllocator, type KvAllocator, type PoolOptions } from '../src/fabric';
import { TsAllocator } from '../test/fabric/ts-allocator';
import { formatRate, measureRate, option, printTable } from './measure';

const seconds = Number(option('--seconds') ?? 1);
const jsonPath = option('--json');

// A small model shape keeps the pool in cache-friendly memory; the operations measured are bookkeeping,
// so one tenant under 'on-tenant-change' zeroes no reused block (what zeroing costs: bench/scrub.bench.ts).
const options: PoolOptions = {
  shape: { layers: 4, kvHeads: 2, headDim: 64, dtypeBytes: 2 },
  tokensPerBlock: 16,
  blockCount: 65_536,
  scrub: 'on-tenant-change',
};
const BATCH = 1024;
const implementations: Array<[string, (o: PoolOptions) => KvAllocator]> = [
  ['native', (o) => new NativeAllocator(o)],
  ['ts', (o) => new TsAllocator(o)],
];

interface Scenario {
  name: string;
  unit: string;
  /** Builds the body for one pool; the body returns how many operations it did. */
  setup(pool: KvAllocator): () => number;
}

const scenarios: Scenario[] = [
  {
    name: `allocate+free, batches of ${BATCH}`,
    unit: 'blocks',
    setup: (pool) => () => {
      pool.freeBlocks(pool.allocateBlocks(1, BATCH));
      return BATCH;
    },
  },
  {
    name: 'allocate+free, one block per call',
    unit: 'blocks',
    setup: (pool) => () => {
      pool.freeBlocks(pool.allocateBlocks(1, 1));
      return 1;
    },
  },
  {
    name: 'create, append 1 block, release',
    unit: 'contexts',
    setup: (pool) => {
      const kv = new Uint8Array(pool.layout.blockBytes).fill(7);
      return () => {
        const ctx = pool.createContext(1);
        pool.append(ctx, kv);
        pool.release(ctx);
        return 1;
      };
    },
  },
  {
    name: 'append 1 token (16 per block)',
    unit: 'appends',
    setup: (pool) => {
      const kv = new Uint8Array(pool.layout.bytesPerToken).fill(3);
      let ctx = pool.createContext(1);
      let appended = 0;
      return () => {
        if (++appended === 16 * 1024) {
          pool.release(ctx);
          ctx = pool.createContext(1);
          appended = 0;
        }
        pool.append(ctx, kv);
        return 1;
      };
    },
  },
  {
    name: 'fork a 64-block context, release',
    unit: 'forks',
    setup: (pool) => {
      const parent = pool.createContext(1);
      pool.append(parent, new Uint8Array(64 * pool.layout.blockBytes));
      return () => {
        pool.release(pool.fork(parent));
        return 1;
      };
    },
  },
  {
    name: 'copy-on-write append after fork',
    unit: 'appends',
    setup: (pool) => {
      const parent = pool.createContext(1);
      pool.append(parent, new Uint8Array(5 * pool.layout.bytesPerToken));
      const kv = new Uint8Array(pool.layout.bytesPerToken);
      return () => {
        const child = pool.fork(parent);
        pool.append(child, kv);
        pool.release(child);
        return 1;
      };
    },
  },
];

interface Result {
  scenario: string;
  unit: string;
  native: number;
  ts: number;
  ratio: number;
}

const results: Result[] = [];
for (const scenario of scenarios) {
  const rates: Record<string, number> = {};
  for (const [name, create] of implementations) {
    const pool = create(options);
    rates[name] = measureRate(scenario.setup(pool), seconds).opsPerSecond;
    pool.close();
  }
  results.push({ scenario: scenario.name, unit: scenario.unit, native: rates.native!, ts: rates.ts!, ratio: rates.native! / rates.ts! });
}

console.log(
  `kvfabric allocator benchmark: ${os.cpus()[0]?.model ?? 'cpu'} x${os.cpus().length}, node ${process.version}, ${seconds}s per figure`,
);
console.log(`pool: ${options.blockCount} blocks of ${computeLayout(options.shape, options.tokensPerBlock ?? 16).blockBytes} bytes\n`);
printTable(
  ['operation', 'unit', 'native', 'pure TS', 'native/TS'],
  results.map((r) => [r.scenario, r.unit, formatRate(r.native), formatRate(r.ts), `${r.ratio.toFixed(2)}x`]),
);
const batched = results[0]!;
console.log(
  `\ntarget: >= 5.00 M/s batched allocations+frees on the native path: ${formatRate(batched.native)} (${batched.native >= 5e6 ? 'met' : 'NOT met'})`,
);

if (jsonPath) {
  fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
  fs.writeFileSync(
    jsonPath,
    JSON.stringify({ machine: { cpu: os.cpus()[0]?.model, cores: os.cpus().length, node: process.version }, seconds, results }, null, 2),
  );
  console.log(`wrote ${jsonPath}`);
}
