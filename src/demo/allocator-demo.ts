// The allocator demo (npm run demo): two tenants' agents on a Llama-3-8B-shaped pool, showing
// sharing by fork, copy-on-write, exact read-back, scrubbing between tenants and typed errors.
import { FabricError, NativeAllocator, type ContextHandle, type KvAllocator } from '../fabric';

const LLAMA_3_8B = { layers: 32, kvHeads: 8, headDim: 128, dtypeBytes: 2 };
const MiB = 1024 * 1024;

/** Stand-in KV bytes: deterministic per (agent, token), so read-back can be checked exactly. */
function kvFor(pool: KvAllocator, seed: number, tokens: number): Uint8Array {
  const bytes = new Uint8Array(tokens * pool.layout.bytesPerToken);
  for (let i = 0; i < bytes.length; i += 4096) bytes.fill((seed * 37 + i / 4096) % 251 || 1, i, i + 4096);
  return bytes;
}

function show(pool: KvAllocator, label: string): void {
  const s = pool.stats();
  console.log(
    `  ${label.padEnd(44)} used ${String(s.usedBlocks).padStart(3)}/${s.totalBlocks} blocks (${(s.usedBytes / MiB).toFixed(0)} MiB), ` +
      `shared ${s.sharedBlocks}, waste ${(s.wasteBytes / 1024).toFixed(0)} KiB, contexts ${s.contexts}`,
  );
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

function main(): void {
  const pool = new NativeAllocator({ shape: LLAMA_3_8B, blockCount: 256 });
  const { bytesPerToken, blockBytes, tokensPerBlock } = pool.layout;
  console.log('kvfabric allocator demo (CPU backend: host memory stands in for GPU memory)');
  console.log(
    `  model shape Llama-3-8B: ${bytesPerToken / 1024} KiB per token, ${tokensPerBlock} tokens = ${blockBytes / MiB} MiB per block\n`,
  );

  const ACME = 1;
  const GLOBEX = 2;
  const planner = pool.createContext(ACME);
  const prompt = kvFor(pool, 1, 1000);
  pool.append(planner, prompt);
  show(pool, 'acme planner: 1000-token prompt');

  const researchers: ContextHandle[] = [pool.fork(planner), pool.fork(planner), pool.fork(planner)];
  show(pool, 'three researcher forks share the prefix');

  researchers.forEach((r, i) => pool.append(r, kvFor(pool, 10 + i, 40)));
  show(pool, 'each researcher appends 40 tokens (CoW)');

  const exact = researchers.every((r) => sameBytes(pool.read(r, 0, 1000), prompt)) && sameBytes(pool.read(planner, 0, 1000), prompt);
  console.log(`  forks read the shared prefix byte-exact: ${exact ? 'yes' : 'NO'}`);
  const ownTail = sameBytes(pool.read(researchers[1]!, 1000, 40), kvFor(pool, 11, 40));
  console.log(`  researcher 2 reads its own tail, not its siblings': ${ownTail ? 'yes' : 'NO'}`);

  pool.pin(planner); // the planner's context must survive eviction (tiers, later)
  for (const r of researchers) pool.release(r);
  show(pool, 'researchers released');

  const globex = pool.createContext(GLOBEX);
  pool.append(globex, kvFor(pool, 99, 5));
  const firstBlock = pool.readBlock(globex, 0);
  const tail = firstBlock.subarray(5 * pool.layout.tokenPlaneBytes, pool.layout.planeBytes);
  console.log(`  globex's first block holds no acme bytes in its unfilled slots: ${tail.every((b) => b === 0) ? 'yes' : 'NO'}`);

  try {
    pool.append(globex, kvFor(pool, 5, 256 * tokensPerBlock));
  } catch (err) {
    if (err instanceof FabricError) console.log(`  an append larger than the pool: ${err.code} (${err.message}); nothing changed`);
  }
  pool.release(globex);
  try {
    pool.read(globex, 0, 1);
  } catch (err) {
    if (err instanceof FabricError) console.log(`  reading a released context: ${err.code}`);
  }
  pool.unpin(planner);
  pool.release(planner);
  show(pool, 'everything released');
  pool.close();
  if (!exact || !ownTail) process.exitCode = 1;
}

main();
