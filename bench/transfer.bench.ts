// Device <-> host transfer throughput of the CUDA backend's tier moves: scattered blocks of 64 KiB to
// 8 MiB, offload (d2h), restore (h2d) and both at once (duplex), through each way (one copy call per
// block; the gather/scatter kernel), against the contiguous pinned copy measured in the same run. Prints
// the ratios against their targets; without a usable CUDA device it prints why and skips.
//   npx tsx bench/transfer.bench.ts [--gib 4] [--repeats 3] [--sizes 64k,256k,1m,2m,8m] [--device 0] [--json out.json]
import fs from 'node:fs';
import path from 'node:path';

import type { TransferFigure } from '../src/fabric/addon-types';
import { loadNativeBinding } from '../src/fabric/native-binding';
import { option, printTable } from './measure';

const KIB = 1024;
const parseSize = (s: string) => Number.parseFloat(s) * (/m$/i.test(s) ? KIB * KIB : /k$/i.test(s) ? KIB : 1);
const sizes = (option('--sizes') ?? '64k,256k,1m,2m,8m').split(',').map(parseSize);
const repeats = Number(option('--repeats') ?? 3);
const device = Number(option('--device') ?? 0);
const jsonPath = option('--json');
/** Targets, as a ratio to the same-run ceiling: one direction by block size, and duplex. */
const oneWayTarget = (blockBytes: number) => (blockBytes >= KIB * KIB ? 0.95 : 0.9);
const DUPLEX_TARGET = 0.9;

function writeJson(value: unknown): void {
  if (!jsonPath) return;
  fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
  fs.writeFileSync(jsonPath, `${JSON.stringify(value, null, 2)}\n`);
}

const size = (bytes: number) => (bytes >= KIB * KIB ? `${bytes / KIB / KIB} MiB` : `${bytes / KIB} KiB`);

function main(): void {
  const binding = loadNativeBinding();
  const probe = binding.cudaProbe(device);
  if (!probe.usable) {
    console.log(`skipped: no CUDA device (${probe.reason})`);
    writeJson({ skipped: `no CUDA device (${probe.reason})` });
    return;
  }
  // A stand-in driver moves host memory with memcpy: a small total keeps that run short.
  const fake = /fake/i.test(probe.name ?? '');
  const gib = Number(option('--gib') ?? (fake ? 1 / 16 : 4));
  const totalBytes = Math.round(gib * 2 ** 30);
  console.log(`CUDA device ${device}: ${probe.name}; ${size(totalBytes)} per figure, best of ${repeats}`);
  const started = Date.now();
  const result = binding.cudaTransferBench({ device, totalBytes, blockBytes: sizes, repeats });
  const ceiling = (direction: string) => result.figures.find((f) => f.way === 'contiguous' && f.direction === direction)?.gbps ?? NaN;

  const rows: string[][] = [];
  const verdicts: Array<TransferFigure & { ratio?: number; target: number; meets?: boolean; ceilingGBps: number }> = [];
  for (const f of result.figures) {
    const target = f.direction === 'duplex' ? DUPLEX_TARGET : oneWayTarget(f.blockBytes);
    const ceil = ceiling(f.direction);
    const ratio = f.gbps === undefined ? undefined : f.gbps / ceil;
    const meets = ratio === undefined || f.way === 'contiguous' ? undefined : ratio >= target;
    verdicts.push({ ...f, ratio, target, meets, ceilingGBps: ceil });
    rows.push([
      f.way === 'contiguous' ? 'contiguous' : size(f.blockBytes),
      f.direction,
      f.way,
      f.gbps === undefined ? 'skipped' : f.gbps.toFixed(1),
      ceil.toFixed(1),
      ratio === undefined ? '-' : ratio.toFixed(3),
      f.way === 'contiguous' || meets === undefined ? '-' : `${target} ${meets ? 'met' : 'missed'}`,
    ]);
  }
  printTable(['block', 'direction', 'way', 'GB/s', 'ceiling GB/s', 'ratio', 'target'], rows);
  // The best way per block size and direction: what `auto` should pick (docs/cuda.md).
  const best: Record<string, { way: string; ratio: number; meets: boolean }> = {};
  for (const v of verdicts) {
    if (v.way === 'contiguous' || v.ratio === undefined) continue;
    const key = `${size(v.blockBytes)} ${v.direction}`;
    if (!best[key] || v.ratio > best[key]!.ratio) best[key] = { way: v.way, ratio: v.ratio, meets: v.meets ?? false };
  }
  console.log('\nbest way per block size and direction:');
  for (const [key, b] of Object.entries(best))
    console.log(`  ${key}: ${b.way} ${b.ratio.toFixed(3)} ${b.meets ? 'meets' : 'misses'} the target`);
  console.log(`kernel: ${result.kernel}; ${((Date.now() - started) / 1000).toFixed(1)} s`);
  for (const reason of new Set(result.figures.flatMap((f) => (f.skipped ? [f.skipped] : [])))) console.log(`skipped: ${reason}`);
  if (fake) console.log('note: stand-in driver (host memcpy): these figures say nothing about a GPU');
  writeJson({ device, deviceName: result.deviceName, fake, totalBytes, repeats, kernel: result.kernel, figures: verdicts, best });
}

main();
