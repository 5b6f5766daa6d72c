// The CUDA backend against the strict stand-in driver's rules (native/test/fake_cuda, docs/cuda.md):
// each case runs in a child process, because the driver loads once per process and the stand-in's
// fault injection, emulated versions and counters are set per process (KVFABRIC_FAKECUDA_*). Runs
// wherever the stand-in was built, on any backend setting; it says nothing about a real GPU.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

import { addonPath } from '../../src/fabric/native-binding';

const buildDir = path.dirname(addonPath());
const fakeDriver = path.join(buildDir, 'libkvfabric_fakecuda.so');
const ipcPeer = path.join(buildDir, 'kvfabric_fakecuda_ipc_peer');
const fabric = path.resolve(__dirname, '../../src/fabric');

interface Child {
  result: Record<string, unknown>;
  report?: Record<string, unknown>;
  stderr: string;
  status: number | null;
}

/**
 * Runs `body` (a script with `fabric`, `tokens(n, value)` and `done(result)` in scope) in a fresh Node
 * process on the stand-in driver with `env`, and returns what it passed to done() plus the stand-in's
 * exit report.
 */
function inChild(env: Record<string, string>, body: string): Child {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvf-strict-'));
  const report = path.join(dir, 'report.json');
  const script = `
    const fabric = require(${JSON.stringify(fabric)});
    const tokens = (n, value) => new Uint8Array(n * 8).fill(value);
    const shape = { layers: 2, kvHeads: 1, headDim: 2, dtypeBytes: 1 };
    const done = (result) => { console.log('RESULT ' + JSON.stringify(result)); };
    const errorOf = (fn) => { try { fn(); return null; } catch (e) { return { code: e.code, message: e.message }; } };
    (async () => { ${body} })().catch((e) => { done({ thrown: { code: e.code, message: e.message } }); });`;
  const run = spawnSync(process.execPath, ['--import', 'tsx', '-e', script], {
    env: {
      ...process.env,
      KVFABRIC_BACKEND: '',
      KVFABRIC_CUDA_TRANSFER: '',
      KVFABRIC_LIBCUDA: fakeDriver,
      KVFABRIC_LIBNVRTC: fakeDriver,
      KVFABRIC_FAKECUDA_REPORT: report,
      KVFABRIC_FAKECUDA_TOTAL_MIB: '512',
      ...env,
    },
    encoding: 'utf8',
    timeout: 60_000,
  });
  const line = run.stdout.split('\n').find((l) => l.startsWith('RESULT '));
  if (!line) throw new Error(`child produced no result (status ${run.status}): ${run.stderr}`);
  const child: Child = { result: JSON.parse(line.slice(7)), stderr: run.stderr, status: run.status };
  if (fs.existsSync(report)) child.report = JSON.parse(fs.readFileSync(report, 'utf8'));
  fs.rmSync(dir, { recursive: true, force: true });
  return child;
}

describe.runIf(fs.existsSync(fakeDriver))('CUDA backend on the strict stand-in driver', () => {
  it("exports IPC handles that map only the pool's own frames, even for a pool far under 2 MiB", () => {
    // Two tiny pools of two tenants; the importing process maps pool A's chunk and dumps all it sees.
    const { result } = inChild(
      {},
      `
      const a = new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 8, backend: 'cuda' });
      const b = new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 8, backend: 'cuda' });
      a.append(a.createContext(1), tokens(32, 0x3c));
      b.append(b.createContext(2), tokens(32, 0xb7));
      const [chunk] = a.exportIpcHandles();
      const out = require('path').join(require('os').tmpdir(), 'kvf-ipc-' + process.pid + '.bin');
      const peer = require('child_process').spawnSync(${JSON.stringify(ipcPeer)},
        [${JSON.stringify(fakeDriver)}, Buffer.from(chunk.handle).toString('hex'), out], { encoding: 'utf8' });
      if (peer.status !== 0) return done({ peerFailed: peer.stderr });
      const seen = require('fs').readFileSync(out); require('fs').rmSync(out);
      const count = (v) => seen.reduce((n, x) => n + (x === v ? 1 : 0), 0);
      done({ chunkBytes: chunk.bytes, frames: chunk.frames, mapped: seen.length, own: count(0x3c), other: count(0xb7) });`,
    );
    expect(result).toMatchObject({ frames: 8, own: 256, other: 0 });
    expect((result.chunkBytes as number) % (2 << 20)).toBe(0);
    expect(result.mapped).toBe(result.chunkBytes);
  });

  it('does not hand out a frame whose scrub failed (scrub always: the same tenant takes it back)', () => {
    // memset 1 zeroes the new pool; release zeroes nothing; memset 2 is the scrub when the frame is
    // handed out again, made to fail.
    const { result } = inChild(
      { KVFABRIC_FAKECUDA_FAIL: 'cuMemsetD8Async:2:1' },
      `
      const pool = new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 4, backend: 'cuda', scrub: 'always' });
      const ctx = pool.createContext(1);
      pool.append(ctx, tokens(4, 0x5a));
      const released = errorOf(() => pool.release(ctx));
      const again = errorOf(() => pool.allocateBlocks(1, 4));
      const free = pool.stats().freeBlocks;
      done({ released, again, free, allocateAll: errorOf(() => pool.allocateBlocks(1, 4)) });`,
    );
    expect(result.released).toBeNull();
    expect(result.again).toMatchObject({ code: 'UNAVAILABLE', message: expect.stringMatching(/cuMemsetD8Async/) });
    expect(result.free).toBe(3);
    expect(result.allocateAll).toMatchObject({ code: 'POOL_EXHAUSTED' });
  });

  it("fails allocateBlocks when the scrub of another tenant's frame fails, and withholds that frame", () => {
    const { result } = inChild(
      { KVFABRIC_FAKECUDA_FAIL: 'cuMemsetD8Async:2:1' },
      `
      const pool = new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 4, backend: 'cuda', scrub: 'on-tenant-change' });
      const ctx = pool.createContext(1);
      pool.append(ctx, tokens(4, 0x5a));
      pool.release(ctx); // on-tenant-change: the frame keeps tenant 1's bytes until tenant 2 takes it
      const failed = errorOf(() => pool.allocateBlocks(2, 4));
      done({ failed, free: pool.stats().freeBlocks });`,
    );
    expect(result.failed).toMatchObject({ code: 'UNAVAILABLE', message: expect.stringMatching(/cuMemsetD8Async/) });
    expect(result.free).toBe(3);
  });

  it('reports the device lost after a sticky fault: restart-the-process errors, no CPU fallback, probe unusable', () => {
    // Launches 1 and 2 are the kernels' self-tests (move, checksum); launch 3 (the demote) hits an illegal
    // address on the GPU.
    const { result } = inChild(
      { KVFABRIC_FAKECUDA_FAIL: 'cuLaunchKernel:3:700' },
      `
      const pool = new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 8, hostBlockCount: 8, backend: 'cuda' });
      const ctx = pool.createContext(1);
      pool.append(ctx, tokens(8, 0x21));
      const demote = await pool.demote(ctx).then(() => null, (e) => ({ code: e.code, message: e.message }));
      const again = await pool.demote(ctx).then(() => null, (e) => ({ code: e.code, message: e.message }));
      const probe = fabric.probeCuda(0);
      const auto = errorOf(() => new fabric.NativeAllocator({ shape, blockCount: 4, backend: 'auto' }).close());
      done({ transfer: pool.backendInfo.transfer, demote, again, probe, auto });`,
    );
    expect(result.transfer).toMatch(/^kernel/);
    const lost = {
      code: 'UNAVAILABLE',
      message: expect.stringMatching(/CUDA device 0 is lost .*CUDA_ERROR_ILLEGAL_ADDRESS.*restart the process/),
    };
    expect(result.demote).toMatchObject(lost);
    expect(result.again).toMatchObject(lost);
    expect(result.probe).toMatchObject({ usable: false, reason: expect.stringMatching(/lost.*restart the process/) });
    expect(result.auto).toMatchObject(lost);
  });

  it('does not take a sticky error at launch for a refused kernel (no retry with copies)', () => {
    // The context was poisoned before the launch (another user of the primary context): the launch fails.
    const { result } = inChild(
      { KVFABRIC_FAKECUDA_FAIL: 'cuLaunchKernel:3:=719' },
      `
      const pool = new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 8, hostBlockCount: 8, backend: 'cuda' });
      const ctx = pool.createContext(1);
      pool.append(ctx, tokens(8, 0x21));
      const demote = await pool.demote(ctx).then(() => null, (e) => ({ code: e.code, message: e.message }));
      done({ demote, probe: fabric.probeCuda(0) });`,
    );
    expect(result.demote).toMatchObject({
      code: 'UNAVAILABLE',
      message: expect.stringMatching(
        /CUDA device 0 is lost \(cuLaunchKernel failed with CUDA_ERROR_LAUNCH_FAILED \(719\)\).*restart the process/,
      ),
    });
    expect(result.probe).toMatchObject({ usable: false });
  });

  it('sums on the CPU, still verifying every restore, when the checksum kernel fails its self-test', () => {
    // Launch 2 is the checksum kernel's self-test, refused (not a fault): the pool keeps the move kernel.
    const { result } = inChild(
      { KVFABRIC_FAKECUDA_FAIL: 'cuLaunchKernel:2:1' },
      `
      const pool = new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 8, hostBlockCount: 8, backend: 'cuda' });
      const ctx = pool.createContext(1);
      pool.append(ctx, tokens(8, 0x21));
      await pool.demote(ctx);
      await pool.promote(ctx);
      done({ transfer: pool.backendInfo.transfer, checksums: pool.backendInfo.checksums, same: Buffer.from(pool.read(ctx, 0, 8)).equals(Buffer.from(tokens(8, 0x21))) });`,
    );
    expect(result.transfer).toMatch(/^kernel/);
    expect(result.checksums).toMatch(/^host \(kernel not used: cuLaunchKernel failed with CUDA_ERROR_INVALID_VALUE/);
    expect(result.same).toBe(true);
  });

  it('builds the kernel before sizing the pool to all free memory, and keeps using it', () => {
    const { result } = inChild(
      { KVFABRIC_FAKECUDA_TOTAL_MIB: '256' },
      `
      const big = { layers: 4, kvHeads: 2, headDim: 64, dtypeBytes: 2 };
      const pool = new fabric.NativeAllocator({ shape: big, tokensPerBlock: 16, blockCount: 1, hostBlockCount: 4, deviceMemoryFraction: 1, backend: 'cuda' });
      const first = pool.backendInfo.transfer;
      const blocks = pool.stats().totalBlocks;
      const ctx = pool.createContext(1);
      pool.append(ctx, new Uint8Array(16 * 2048).fill(9));
      await pool.demote(ctx); await pool.promote(ctx);
      pool.close();
      const second = new fabric.NativeAllocator({ shape: big, tokensPerBlock: 16, blockCount: 4, backend: 'cuda' });
      done({ first, blocks, second: second.backendInfo.transfer });`,
    );
    expect(result.first).toMatch(/^kernel \(cubin/);
    expect(result.second).toMatch(/^kernel \(cubin/);
    // 256 MiB less the context's reserve (64 MiB here), the kernel and the 64 MiB headroom, in 32 KiB blocks
    expect(result.blocks).toBeGreaterThan(3500);
  });

  it('compiles a CUBIN for the device, refuses an NVRTC newer than the driver, and says which was used', () => {
    // Driver CUDA 12.4 with NVRTC 12.8: PTX from it would be too new for the driver's JIT.
    const older = inChild(
      { KVFABRIC_FAKECUDA_DRIVER_VERSION: '12040', KVFABRIC_FAKECUDA_NVRTC_VERSION: '12.8' },
      `
      done({ transfer: new fabric.NativeAllocator({ shape, blockCount: 4, backend: 'cuda' }).backendInfo.transfer });`,
    );
    expect(older.result.transfer).toMatch(/^kernel \(cubin sm_90, NVRTC 12\.8/);
    const newer = inChild(
      { KVFABRIC_FAKECUDA_DRIVER_VERSION: '12040', KVFABRIC_FAKECUDA_NVRTC_VERSION: '13.0' },
      `
      done({ transfer: new fabric.NativeAllocator({ shape, blockCount: 4, backend: 'cuda' }).backendInfo.transfer });`,
    );
    expect(newer.result.transfer).toMatch(/^copies \(kernel not used: .*NVRTC 13\.0, newer than the driver's CUDA 12/);
  });

  it("leaves the caller's current context alone, stages every append and read through pinned memory, reads the block table from device memory", () => {
    // Every thread starts with another engine's context current, as next to an in-process CUDA engine.
    const { result, report, stderr } = inChild(
      { KVFABRIC_FAKECUDA_ENGINE_CONTEXT: '1' },
      `
      const pool = new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 16, hostBlockCount: 16, backend: 'cuda' });
      const ctx = pool.createContext(1);
      pool.append(ctx, tokens(10, 1));
      await pool.appendAsync(ctx, tokens(7, 2));
      const a = pool.read(ctx, 0, 17);
      const b = await pool.readAsync(ctx, 3, 9);
      await pool.demote(ctx); await pool.promote(ctx);
      const c = pool.read(ctx, 0, 17);
      pool.close();
      done({ ok: a[0] === 1 && a[80] === 2 && b[0] === 1 && c[136 - 1] === 2 });`,
    );
    expect(result.ok).toBe(true);
    expect(report).toMatchObject({ displacedContexts: 0, mainThreadContext: 'engine', pageableCopies: 0, kernelHostTables: 0 });
    expect(stderr).not.toMatch(/spins a core/); // every wait is on a blocking-sync event
  });

  it("keeps pools on two devices apart: each device's own context, streams and kernel architecture", () => {
    const { result } = inChild(
      {},
      `
      const pools = [0, 1].map((device) => new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 8, hostBlockCount: 8, backend: 'cuda', device }));
      const ctxs = pools.map((p, i) => { const c = p.createContext(1); p.append(c, tokens(9, 10 + i)); return c; });
      await Promise.all(pools.map((p, i) => p.demote(ctxs[i])));
      await Promise.all(pools.map((p, i) => p.promote(ctxs[i])));
      const same = pools.every((p, i) => p.read(ctxs[i], 0, 9).every((x) => x === 10 + i));
      done({ same, transfers: pools.map((p) => p.backendInfo.transfer) });`,
    );
    expect(result.same).toBe(true);
    expect(result.transfers).toEqual([expect.stringMatching(/^kernel \(cubin sm_90/), expect.stringMatching(/^kernel \(cubin sm_80/)]);
  });

  it('waits for the stream when no event can be made, so no copy outlives the call', () => {
    // Every cuEventCreate fails and every queued operation is slow: only a stream wait keeps bytes right.
    const { result } = inChild(
      { KVFABRIC_FAKECUDA_FAIL: 'cuEventCreate:*:2', KVFABRIC_FAKECUDA_DELAY_US: '2000' },
      `
      const pool = new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 8, backend: 'cuda' });
      const ctx = pool.createContext(1);
      pool.append(ctx, tokens(6, 0x44));
      const back = pool.read(ctx, 0, 6);
      done({ same: back.every((x) => x === 0x44) && back.length === 48 });`,
    );
    expect(result).toMatchObject({ same: true });
  });

  it('releases the primary context when opening the device fails', () => {
    const { result, report } = inChild(
      { KVFABRIC_FAKECUDA_FAIL: 'cuCtxPushCurrent_v2:1:2,cuCtxSetCurrent:1:2' },
      `
      done({ probe: fabric.probeCuda(0) });`,
    );
    expect(result.probe).toMatchObject({ usable: false });
    expect(report).toMatchObject({ primaryRetains: [0, 0] });
  });

  it('lets driver calls of worker threads finish before the driver tears down at exit', () => {
    // Each queued operation takes 100 ms; the process exits while a tier move is in flight.
    const child = inChild(
      { KVFABRIC_FAKECUDA_DELAY_US: '100000' },
      `
      const pool = new fabric.NativeAllocator({ shape, tokensPerBlock: 4, blockCount: 8, hostBlockCount: 8, backend: 'cuda' });
      const ctx = pool.createContext(1);
      pool.append(ctx, tokens(8, 3));
      pool.demote(ctx).catch(() => {});
      setTimeout(() => { done({ exiting: true }); process.exit(0); }, 20);`,
    );
    expect(child.result.exiting).toBe(true);
    expect(child.stderr).not.toMatch(/torn down at exit while|after deinitialisation/);
    expect(child.status).toBe(0);
  });
});
