// A small pool of worker threads running AES-256-GCM and CRC-32, so bulk crypto never runs on the event
// loop. A job's bytes are a region of shared staging memory (worked on where it is) or a whole
// ArrayBuffer (transferred there and back, never copied). Jobs go to the thread with the fewest queued; a
// thread that dies fails its queued jobs with UNAVAILABLE and is replaced on the next job. Idle threads
// do not keep the process alive (they are unref'd whenever nothing is queued).

import path from 'node:path';
import { Worker } from 'node:worker_threads';

import { FabricError } from '../../fabric/errors';
import type { CryptoJob, CryptoReply, CryptoWork, CryptoWorkerData, OpenItem, SealItem } from './crypto-worker';

export type { OpenItem, SealItem } from './crypto-worker';

export interface SealResult {
  /** The job's bytes, now ciphertext (a new view when they were transferred). */
  bytes: Uint8Array;
  /** 16-byte GCM tags, one per item in order. */
  tags: Uint8Array;
  /** CRC-32 of each item's plaintext, when asked for. */
  checksums?: Uint32Array;
}

export interface OpenResult {
  /** The plaintext: the job's bytes (a new view when transferred). */
  plaintext: Uint8Array;
  /** -1, or the first item that failed; then the plaintext is zeroed, nothing unverified comes back. */
  failedItem: number;
  failure?: 'tag' | 'checksum';
}

interface Pending {
  resolve(reply: CryptoReply): void;
  reject(err: Error): void;
}

interface Thread {
  worker: Worker;
  pending: Map<number, Pending>;
}

/**
 * Only whole ArrayBuffers and SharedArrayBuffer regions can travel without a copy: a view of part of an
 * ArrayBuffer would transfer (detach) the rest of it too.
 */
function checkTravels(bytes: Uint8Array): void {
  if (bytes.buffer instanceof ArrayBuffer && (bytes.byteOffset !== 0 || bytes.byteLength !== bytes.buffer.byteLength)) {
    throw new FabricError('INVALID_ARGUMENT', 'a crypto job needs a whole ArrayBuffer or a SharedArrayBuffer region');
  }
}

function viewOf(reply: CryptoReply, sent: Uint8Array): Uint8Array {
  return reply.buffer instanceof ArrayBuffer ? new Uint8Array(reply.buffer) : sent;
}

/**
 * The thread's entry, beside this module: crypto-worker.js in the compiled package; crypto-worker.ts
 * when the sources run through tsx or vitest, whose transforms do not reach a worker thread, so that
 * thread loads tsx's CommonJS hook itself (tsx is a development dependency, there only then).
 */
function workerEntry(): { file: string; execArgv?: string[] } {
  const extension = path.extname(__filename);
  const file = path.join(__dirname, `crypto-worker${extension}`);
  return extension === '.ts' ? { file, execArgv: ['--require', require.resolve('tsx/cjs')] } : { file };
}

export class CryptoPool {
  private readonly threads: Array<Thread | undefined>;
  private nextJobId = 1;
  private closed = false;

  /** inPlace: the threads use the addon's in-place AES-GCM where it offers one, else Node's crypto API. */
  constructor(
    threadCount: number,
    private readonly inPlace: boolean,
  ) {
    this.threads = new Array<Thread | undefined>(threadCount).fill(undefined);
  }

  get size(): number {
    return this.threads.length;
  }

  /**
   * Encrypts every item of `bytes` in place, and with `checksums` sums each item's plaintext too. The
   * caller must not touch `bytes` until this settles.
   */
  async seal(key: Uint8Array, bytes: Uint8Array, items: SealItem[], checksums = true): Promise<SealResult> {
    const reply = await this.run({ op: 'seal', key, items, checksums }, bytes);
    return { bytes: viewOf(reply, bytes), tags: reply.tags!, ...(reply.checksums ? { checksums: reply.checksums } : {}) };
  }

  /** Decrypts and verifies every item of `bytes` in place, stopping at the first failure. */
  async open(key: Uint8Array, bytes: Uint8Array, items: OpenItem[]): Promise<OpenResult> {
    const reply = await this.run({ op: 'open', key, items }, bytes);
    const plaintext = viewOf(reply, bytes);
    return { plaintext, failedItem: reply.failedItem!, ...(reply.failure !== undefined && { failure: reply.failure }) };
  }

  async close(): Promise<void> {
    this.closed = true;
    const running = this.threads.filter((t): t is Thread => t !== undefined);
    this.threads.fill(undefined);
    for (const thread of running) this.failPending(thread, new FabricError('INVALID_STATE', 'the cold store was closed'));
    await Promise.all(running.map((t) => t.worker.terminate()));
  }

  private run(job: CryptoWork, bytes: Uint8Array): Promise<CryptoReply> {
    if (this.closed) return Promise.reject(new FabricError('INVALID_STATE', 'the cold store is closed'));
    return new Promise((resolve, reject) => {
      let thread: Thread;
      try {
        checkTravels(bytes);
        const slot = this.leastBusySlot();
        thread = this.threads[slot] ?? this.spawn(slot);
      } catch (err) {
        reject(
          err instanceof FabricError
            ? err
            : new FabricError('UNAVAILABLE', `cannot start a cold-tier crypto thread: ${(err as Error).message}`),
        );
        return;
      }
      const id = this.nextJobId++;
      const message: CryptoJob = { ...job, id, buffer: bytes.buffer, byteOffset: bytes.byteOffset, byteLength: bytes.byteLength };
      try {
        thread.worker.postMessage(message, bytes.buffer instanceof ArrayBuffer ? [bytes.buffer] : []);
      } catch (err) {
        reject(new FabricError('UNAVAILABLE', `cannot hand a job to a cold-tier crypto thread: ${(err as Error).message}`));
        return;
      }
      if (thread.pending.size === 0) thread.worker.ref();
      thread.pending.set(id, { resolve, reject });
    });
  }

  private leastBusySlot(): number {
    let best = 0;
    let bestLoad = Infinity;
    this.threads.forEach((thread, slot) => {
      const load = thread?.pending.size ?? 0;
      if (load < bestLoad) {
        best = slot;
        bestLoad = load;
      }
    });
    return best;
  }

  private spawn(slot: number): Thread {
    const { file, execArgv } = workerEntry();
    const workerData: CryptoWorkerData = { inPlace: this.inPlace };
    const worker = new Worker(file, { name: `kvfabric-cold-crypto-${slot}`, workerData, ...(execArgv && { execArgv }) });
    const thread: Thread = { worker, pending: new Map() };
    worker.unref();
    worker.on('message', (reply: CryptoReply) => {
      const pending = thread.pending.get(reply.id);
      if (pending === undefined) return;
      thread.pending.delete(reply.id);
      if (thread.pending.size === 0) worker.unref();
      if (reply.error !== undefined) pending.reject(new FabricError('UNAVAILABLE', `cold-tier crypto failed: ${reply.error}`));
      else pending.resolve(reply);
    });
    const died = (why: string) => {
      if (this.threads[slot] === thread) this.threads[slot] = undefined;
      this.failPending(thread, new FabricError('UNAVAILABLE', `a cold-tier crypto thread died (${why}); the operation did not complete`));
    };
    worker.on('error', (err) => died(err.message));
    worker.on('exit', (code) => died(`exit code ${code}`));
    this.threads[slot] = thread;
    return thread;
  }

  private failPending(thread: Thread, err: Error): void {
    for (const pending of thread.pending.values()) pending.reject(err);
    thread.pending.clear();
    thread.worker.unref();
  }
}
