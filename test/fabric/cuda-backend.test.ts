// The backend choice and the CUDA-only engine API. Runs everywhere: on the CPU backend it checks the
// refusals and the reasons CUDA is unusable (in child processes, since the driver loads once per
// process); with KVFABRIC_BACKEND=cuda on a GPU, or on the fake driver (KVFABRIC_LIBCUDA), it checks
// device addresses, IPC export and that tier moves keep bytes intact through the CUDA backend.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { afterEach, describe, expect, it } from 'vitest';

import { FabricError, NativeAllocator, probeCuda } from '../../src/fabric';
import { TsAllocator } from './ts-allocator';
import { addonPath } from '../../src/fabric/native-binding';
import type { ContextHandle } from '../../src/fabric/types';
import { expectSameBytes, tinyShape, tokenBytes } from './implementations';

const onCuda = process.env.KVFABRIC_BACKEND === 'cuda';
const fakeDriver = path.join(path.dirname(addonPath()), 'libkvfabric_fakecuda.so');

/** Creates a pool in a fresh process with env, and returns the error it threw (or its backend). */
function poolInChild(env: Record<string, string>, options: object): { code?: string; message?: string; backend?: unknown } {
  const script = `
    const { NativeAllocator } = require(${JSON.stringify(path.resolve(__dirname, '../../src/fabric'))});
    try {
      const p = new NativeAllocator(${JSON.stringify({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8, ...options })});
      console.log(JSON.stringify({ backend: p.backendInfo })); p.close();
    } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }`;
  const result = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], {
    env: { ...process.env, KVFABRIC_BACKEND: '', ...env },
    encoding: 'utf8',
  });
  const line = result.stdout.trim().split('\n').pop() ?? '';
  if (!line.startsWith('{')) throw new Error(`child failed: ${result.stderr}`);
  return JSON.parse(line);
}

describe('backend choice', () => {
  it('TsAllocator refuses backend cuda with UNAVAILABLE and ignores KVFABRIC_BACKEND', () => {
    expect(() => new TsAllocator({ shape: tinyShape, blockCount: 4, backend: 'cuda' })).toThrow(FabricError);
    try {
      new TsAllocator({ shape: tinyShape, blockCount: 4, backend: 'cuda' });
    } catch (err) {
      expect((err as FabricError).code).toBe('UNAVAILABLE');
    }
    expect(() => new TsAllocator({ shape: tinyShape, blockCount: 4 }).close()).not.toThrow();
  });

  it('rejects bad backend, device and deviceMemoryFraction options as INVALID_ARGUMENT', () => {
    for (const bad of [
      { backend: 'gpu' },
      { device: -1 },
      { device: 1.5 },
      { deviceMemoryFraction: 0 },
      { deviceMemoryFraction: 1.5 },
      { deviceMemoryFraction: 'x' },
    ]) {
      expect(() => new NativeAllocator({ shape: tinyShape, blockCount: 4, ...(bad as object) }), JSON.stringify(bad)).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
    }
  });

  it('cpu is host memory and has no device addresses or IPC handles', () => {
    const pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8, backend: 'cpu' });
    try {
      expect(pool.backendInfo.kind).toBe('cpu');
      const ctx = pool.createContext(1);
      pool.append(ctx, tokenBytes(4, 1));
      expect(() => pool.blockDeviceAddresses(ctx)).toThrow(expect.objectContaining({ code: 'INVALID_STATE' }));
      expect(() => pool.exportIpcHandles()).toThrow(expect.objectContaining({ code: 'INVALID_STATE' }));
    } finally {
      pool.close();
    }
  });

  it.runIf(fs.existsSync(fakeDriver))('names why CUDA is unusable: library, cuInit, device index; auto falls back to CPU', () => {
    const missing = poolInChild({ KVFABRIC_LIBCUDA: '/nonexistent/libcuda.so.1' }, { backend: 'cuda' });
    expect(missing.code).toBe('UNAVAILABLE');
    expect(missing.message).toMatch(/CUDA backend requested but not usable: CUDA driver library \/nonexistent\/libcuda.so.1 not found/);
    const noDevice = poolInChild({ KVFABRIC_LIBCUDA: fakeDriver, KVFABRIC_FAKECUDA_INIT_ERROR: '100' }, { backend: 'cuda' });
    expect(noDevice.message).toMatch(/cuInit failed with CUDA_ERROR_NO_DEVICE \(100\)/);
    const badIndex = poolInChild({ KVFABRIC_LIBCUDA: fakeDriver }, { backend: 'cuda', device: 7 });
    expect(badIndex.message).toMatch(/no CUDA device index 7/);
    const auto = poolInChild({ KVFABRIC_LIBCUDA: '/nonexistent/libcuda.so.1' }, { backend: 'auto' });
    expect(auto.backend).toMatchObject({ kind: 'cpu', reason: expect.stringMatching(/not found/) });
    const fromEnv = poolInChild({ KVFABRIC_LIBCUDA: fakeDriver, KVFABRIC_BACKEND: 'cuda' }, {});
    expect(fromEnv.backend).toMatchObject({ kind: 'cuda', device: 0 });
  });
});

describe.runIf(onCuda)('CUDA backend', () => {
  let pool: NativeAllocator | undefined;
  afterEach(() => pool?.close());

  it('reports the device it runs on', () => {
    pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8 });
    const probe = probeCuda(0);
    expect(pool.backendInfo).toMatchObject({ kind: 'cuda', device: 0, name: probe.name });
    console.log(`CUDA backend on ${pool.backendInfo.name}; tier moves: ${pool.backendInfo.transfer}`);
  });

  it('hands out device addresses of a resident context, frame by frame, and refuses an offloaded one', async () => {
    pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8, hostBlockCount: 8 });
    const ctx = pool.createContext(1);
    pool.append(ctx, tokenBytes(10, 3));
    const table = pool.blockTable(ctx);
    const addresses = pool.blockDeviceAddresses(ctx);
    const [chunk] = pool.exportIpcHandles();
    expect(addresses.length).toBe(table.length);
    const base = addresses[0]! - BigInt(table[0]! * pool.layout.blockBytes);
    table.forEach((frame, i) => expect(addresses[i]).toBe(base + BigInt(frame * pool!.layout.blockBytes)));
    expect(chunk!.handle.length).toBe(64);
    expect(chunk!.frames).toBe(8);
    await pool.demote(ctx);
    expect(() => pool!.blockDeviceAddresses(ctx)).toThrow(expect.objectContaining({ code: 'INVALID_STATE' }));
    await pool.promote(ctx);
    expectSameBytes(pool.read(ctx, 0, 10), tokenBytes(10, 3));
  });

  it('sums restores on the device, where their bytes landed', () => {
    pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 8, hostBlockCount: 8 });
    expect(pool.backendInfo.checksums).toBe('device kernel');
  });

  it('sums a lease of more blocks than one checksum launch takes (4096) in several launches', async () => {
    pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 5000, hostBlockCount: 5000 });
    const ctx = pool.createContext(1);
    const bytes = tokenBytes(5000 * 4 - 3, 7);
    pool.append(ctx, bytes);
    await pool.demote(ctx);
    await pool.promote(ctx);
    expectSameBytes(pool.read(ctx, 0, 5000 * 4 - 3), bytes);
  });

  it('sizes the device tier from a fraction of free device memory', () => {
    pool = new NativeAllocator({ shape: tinyShape, tokensPerBlock: 4, blockCount: 1, deviceMemoryFraction: 1e-6 });
    expect(pool.stats().totalBlocks).toBeGreaterThan(1);
  });

  it('overlaps an offload of one context with a restore of another and keeps both intact', async () => {
    const shape = { layers: 4, kvHeads: 2, headDim: 64, dtypeBytes: 2 }; // 2 KiB per token, 32 KiB blocks
    pool = new NativeAllocator({ shape, tokensPerBlock: 16, blockCount: 64, hostBlockCount: 64 });
    const bytesPerToken = pool.layout.bytesPerToken;
    const a = pool.createContext(1);
    const b = pool.createContext(2);
    const aBytes = tokenBytes(300, 5, bytesPerToken);
    const bBytes = tokenBytes(300, 6, bytesPerToken);
    pool.append(a, aBytes);
    pool.append(b, bBytes);
    await pool.demote(b);
    for (let round = 0; round < 5; round++) {
      await Promise.all([pool.demote(a), pool.promote(b)]);
      await Promise.all([pool.demote(b), pool.promote(a)]);
    }
    await pool.promote(b);
    expectSameBytes(pool.read(a, 0, 300), aBytes);
    expectSameBytes(pool.read(b, 0, 300), bBytes);
  });
});

// A byte flipped on the way to the device (the stand-in driver's KVFABRIC_FAKECUDA_FLIP_UPLOADS; hardware
// offers no such switch): the device-side sums see what landed, host-side sums only what was sent.
describe.runIf(onCuda && process.env.KVFABRIC_LIBCUDA?.includes('fakecuda'))('CUDA backend: checksums of what landed', () => {
  const shape = { layers: 4, kvHeads: 2, headDim: 64, dtypeBytes: 2 }; // 2 KiB per token, 32 KiB blocks
  let pool: NativeAllocator | undefined;
  afterEach(() => {
    delete process.env.KVFABRIC_FAKECUDA_FLIP_UPLOADS;
    delete process.env.KVFABRIC_CUDA_CHECKSUMS;
    pool?.close();
  });

  /** A 40-token context (3 pages) on the host tier, then a promote with every block flipped in flight. */
  async function promoteThroughBadLink(): Promise<{
    pool: NativeAllocator;
    ctx: ContextHandle;
    bytes: Uint8Array;
    promoted: Promise<void>;
  }> {
    pool = new NativeAllocator({ shape, tokensPerBlock: 16, blockCount: 8, hostBlockCount: 8 });
    const ctx = pool.createContext(1);
    const bytes = tokenBytes(40, 9, pool.layout.bytesPerToken);
    pool.append(ctx, bytes);
    await pool.demote(ctx);
    process.env.KVFABRIC_FAKECUDA_FLIP_UPLOADS = String(pool.layout.blockBytes);
    const promoted = pool.promote(ctx);
    promoted.catch(() => undefined);
    return { pool, ctx, bytes, promoted };
  }

  it('fails the promote with INTEGRITY naming the page, moves nothing, and a clean retry restores every byte', async () => {
    const { pool, ctx, bytes, promoted } = await promoteThroughBadLink();
    await expect(promoted).rejects.toMatchObject({
      code: 'INTEGRITY',
      message: expect.stringMatching(/page \d+ does not match its checksum/),
    });
    delete process.env.KVFABRIC_FAKECUDA_FLIP_UPLOADS;
    expect(pool.pageResidency(ctx)).toEqual(['host', 'host', 'host']);
    await pool.promote(ctx);
    expect(pool.pageResidency(ctx)).toEqual(['device', 'device', 'device']);
    expectSameBytes(pool.read(ctx, 0, 40), bytes);
  });

  it('with KVFABRIC_CUDA_CHECKSUMS=host the CPU sums what was sent, so the same flip passes unseen', async () => {
    process.env.KVFABRIC_CUDA_CHECKSUMS = 'host';
    const { pool, ctx, bytes, promoted } = await promoteThroughBadLink();
    expect(pool.backendInfo.checksums).toBe('host (KVFABRIC_CUDA_CHECKSUMS=host)');
    await promoted;
    delete process.env.KVFABRIC_FAKECUDA_FLIP_UPLOADS;
    expect(Buffer.from(pool.read(ctx, 0, 40)).equals(Buffer.from(bytes))).toBe(false);
  });
});
