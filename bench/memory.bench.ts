// Memory: the blocks N forks of one long shared prefix use against N private copies of it, and the
// internal waste (allocated but unfilled token slots) of contexts of a few lengths. Block counts come
// from the native allocator's own statistics; the allocator's block accounting does not depend on the
// bytes per token, so a tiny shape keeps the pool small and bytes are reported at the Llama-3-8B shape
// (16 tokens per block, 128 KiB per token: 2 MiB blocks).
//   npx tsx bench/memory.bench.ts [--prefix 8100] [--turn 500] [--forks 4,16,64] [--json FILE]
import fs from 'node:fs';
import path from 'node:path';

import { NativeAllocator } from '../src/fabric';
import { bytesPerTokenOf } from '../src/fabric/layout';
import { MODELS } from '../src/engines/models';
import { option, printTable } from './measure';

// Not a multiple of 16: the prefix's last block is partly filled, so each fork's first append copies it.
const prefixTokens = Number(option('--prefix') ?? 8100);
const turnTokens = Number(option('--turn') ?? 500);
const forkCounts = (option('--forks') ?? '4,16,64').split(',').map(Number);
const jsonPath = option('--json');

const LLAMA = MODELS['llama-3-8b']!;
const LLAMA_BLOCK_BYTES = bytesPerTokenOf(LLAMA.shape) * LLAMA.tokensPerBlock;
const SHAPE = { layers: 1, kvHeads: 1, headDim: 8, dtypeBytes: 2 }; // 32 bytes per token
const TOKEN_BYTES = bytesPerTokenOf(SHAPE);
const GiB = 2 ** 30;

function pool(blocks: number): NativeAllocator {
  return new NativeAllocator({ shape: SHAPE, tokensPerBlock: LLAMA.tokensPerBlock, blockCount: blocks });
}
const tokens = (n: number) => new Uint8Array(n * TOKEN_BYTES).fill(1);

export interface ForkRow {
  forks: number;
  prefixTokens: number;
  turnTokens: number;
  forkedBlocks: number;
  sharedBlocks: number;
  privateBlocks: number;
  forkedLlamaBytes: number;
  privateLlamaBytes: number;
  saving: number;
}

export interface WasteRow {
  tokens: number;
  blocks: number;
  wasteTokens: number;
  wasteLlamaBytes: number;
  wasteFraction: number;
}

function forkRow(forks: number): ForkRow {
  const capacity = Math.ceil(((forks + 1) * (prefixTokens + turnTokens)) / LLAMA.tokensPerBlock) + 64;
  // N forks of one parent, each then takes a private turn.
  const shared = pool(capacity);
  const parent = shared.createContext(1);
  shared.append(parent, tokens(prefixTokens));
  for (let i = 0; i < forks; i++) shared.append(shared.fork(parent), tokens(turnTokens));
  const forkedStats = shared.stats();
  shared.close();
  // The same N agents, each with its own copy of the prefix (the parent's copy included, as above).
  const copies = pool(capacity);
  copies.append(copies.createContext(1), tokens(prefixTokens));
  for (let i = 0; i < forks; i++) copies.append(copies.createContext(1), tokens(prefixTokens + turnTokens));
  const privateBlocks = copies.stats().usedBlocks;
  copies.close();
  return {
    forks,
    prefixTokens,
    turnTokens,
    forkedBlocks: forkedStats.usedBlocks,
    sharedBlocks: forkedStats.sharedBlocks,
    privateBlocks,
    forkedLlamaBytes: forkedStats.usedBlocks * LLAMA_BLOCK_BYTES,
    privateLlamaBytes: privateBlocks * LLAMA_BLOCK_BYTES,
    saving: privateBlocks / forkedStats.usedBlocks,
  };
}

function wasteRow(length: number): WasteRow {
  const p = pool(Math.ceil(length / LLAMA.tokensPerBlock) + 1);
  const ctx = p.createContext(1);
  p.append(ctx, tokens(length));
  const stats = p.contextStats(ctx);
  p.close();
  const wasteTokens = stats.wasteBytes / TOKEN_BYTES;
  return {
    tokens: length,
    blocks: stats.blocks,
    wasteTokens,
    wasteLlamaBytes: wasteTokens * bytesPerTokenOf(LLAMA.shape),
    wasteFraction: wasteTokens / (stats.blocks * LLAMA.tokensPerBlock),
  };
}

const forkRows = forkCounts.map(forkRow);
const wasteRows = [1, 100, 1000, 8100, 8192, 32_769].map(wasteRow);

console.log(
  `memory benchmark: block counts from the native allocator, bytes at the Llama-3-8B shape (${LLAMA_BLOCK_BYTES / 2 ** 20} MiB blocks)\n`,
);
printTable(
  ['agents', 'shared prefix + own turn', 'forked: blocks (shared)', 'private copies: blocks', 'forked GiB', 'private GiB', 'saving'],
  forkRows.map((r) => [
    `parent + ${r.forks} forks`,
    `${r.prefixTokens} + ${r.turnTokens} tokens`,
    `${r.forkedBlocks} (${r.sharedBlocks})`,
    String(r.privateBlocks),
    (r.forkedLlamaBytes / GiB).toFixed(2),
    (r.privateLlamaBytes / GiB).toFixed(2),
    `${r.saving.toFixed(2)}x`,
  ]),
);
console.log();
printTable(
  ['context tokens', 'blocks', 'unfilled slots', 'waste (Llama-3-8B)', 'waste / allocated'],
  wasteRows.map((r) => [
    String(r.tokens),
    String(r.blocks),
    String(r.wasteTokens),
    `${(r.wasteLlamaBytes / 2 ** 20).toFixed(3)} MiB`,
    `${(r.wasteFraction * 100).toFixed(2)}%`,
  ]),
);
if (jsonPath !== undefined) {
  fs.mkdirSync(path.dirname(jsonPath), { recursive: true });
  fs.writeFileSync(jsonPath, JSON.stringify({ llamaBlockBytes: LLAMA_BLOCK_BYTES, forks: forkRows, waste: wasteRows }, null, 2));
}
