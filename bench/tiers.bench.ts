// Host-tier copy throughput on the CPU backend: demote (device -> host) and promote (host -> device)
// of one context, against a plain memory copy of the same bytes measured in the same run.
//   npx tsx bench/tiers.bench.ts [--mib 1024] [--rounds 5] [--json build/bench/tiers.json]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { NativeAllocator } from '../src/fabric';
import { printTable } from './measure';

const args = process.argv.slice(2);
const option = (name: string, fallback: number) => {
  const at = args.indexOf(name);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const mib = option('--mib', 1024);
const rounds = option('--rounds', 5);
const jsonAt = args.indexOf('--json');
const jsonPath = jsonAt >= 0 ? args[jsonAt + 1] : undefined;

const LLAMA_3_8B = { layers: 32, kvHeads: 8, headDim: 128, dtypeBytes: 2 }; // 2 MiB blocks
const blockBytes = 2 * 1024 * 1024;
const blocks = Math.max(1, Math.floor((mib * 1024 * 1024) / blockBytes));
const bytes = blocks * blockBytes;

function gbps(totalBytes: number, ns: bigint): number {
  return totalBytes / Number(ns); // bytes per ns = GB/s
}

async function main(): Promise<void> {
  const pool = new NativeAllocator({ shape: LLAMA_3_8B, blockCount: blocks, hostBlockCount: blocks });
  const ctx = pool.createContext(1);
  const tokens = blocks * pool.layout.tokensPerBlock;
  const chunk = new Uint8Array(pool.layout.bytesPerToken * pool.layout.tokensPerBlock * 64).fill(0x5a);
  for (let t = 0; t < tokens; t += 16 * 64) await pool.appendAsync(ctx, chunk.subarray(0, Math.min(tokens - t, 16 * 64) * pool.layout.bytesPerToken));

  const source = Buffer.alloc(bytes, 0x5a);
  const target = Buffer.alloc(bytes); // both touched before timing, like the pool's frames after warm-up
  source.copy(target);
  await pool.demote(ctx);
  await pool.promote(ctx);

  const best = { demote: 0, promote: 0, memcpy: 0 };
  for (let r = 0; r < rounds; r++) {
    let t0 = process.hrtime.bigint();
    await pool.demote(ctx);
    best.demote = Math.max(best.demote, gbps(bytes, process.hrtime.bigint() - t0));
    t0 = process.hrtime.bigint();
    await pool.promote(ctx);
    best.promote = Math.max(best.promote, gbps(bytes, process.hrtime.bigint() - t0));
    t0 = process.hrtime.bigint();
    source.copy(target);
    best.memcpy = Math.max(best.memcpy, gbps(bytes, process.hrtime.bigint() - t0));
  }
  pool.close();

  console.log(`kvfabric host-tier benchmark: ${os.cpus()[0]?.model ?? 'cpu'} x${os.cpus().length}, node ${process.version}`);
  console.log(`one context of ${blocks} blocks x 2 MiB = ${(bytes / 2 ** 30).toFixed(2)} GiB, best of ${rounds} rounds\n`);
  printTable(
    ['copy', 'GB/s', 'vs memcpy'],
    [
      ['memcpy (Buffer.copy), same bytes', best.memcpy.toFixed(2), '1.00'],
      ['demote: device -> host', best.demote.toFixed(2), (best.demote / best.memcpy).toFixed(2)],
      ['promote: host -> device', best.promote.toFixed(2), (best.promote / best.memcpy).toFixed(2)],
    ],
  );
  if (jsonPath !== undefined) {
    fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
    fs.writeFileSync(jsonPath, JSON.stringify({ bytes, blocks, rounds, bestGBps: best }, null, 2));
  }
}

void main();
