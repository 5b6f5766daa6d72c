// The cold tier's crypto thread: the entry of each worker thread of crypto-pool.ts, and the messages they
// exchange. It knows nothing of the file formats: it seals or opens byte ranges of one buffer (shared, or
// transferred) in place, with the IV, associated data, tag and checksum that the pool's caller computed.
//
// AES-GCM runs in place through the addon (loaded here through the one loader) when the pool asks for it
// and the addon offers it; otherwise through Node's crypto API in 64 KiB chunks: OpenSSL's output for a
// chunk is a small, cache-hot allocation copied straight back, where a whole 2 MiB block would be fresh
// memory to fault in (which costs more than AES-GCM), and each chunk is checksummed (when asked) while it
// is still in cache.
import { createCipheriv, createDecipheriv } from 'node:crypto';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { crc32 } from 'node:zlib';

import type { NativeAddon } from '../../fabric/addon-types';
import { loadNativeBinding } from '../../fabric/native-binding';

/** One byte range of a job's bytes. */
export interface SealItem {
  offset: number;
  length: number;
  iv: Uint8Array;
  aad: Uint8Array;
}

export interface OpenItem extends SealItem {
  tag: Uint8Array;
  /** CRC-32 the plaintext must have; omitted for items checked otherwise (manifests). */
  checksum?: number;
}

/** What the pool hands each thread at its start. */
export interface CryptoWorkerData {
  /** Use the addon's in-place AES-GCM where it offers it. */
  inPlace: boolean;
}

/** What a job asks for. The key is the thread's copy of the data key, zeroed once the job is done. */
export type CryptoWork =
  | { op: 'seal'; key: Uint8Array; items: SealItem[]; checksums?: boolean }
  | { op: 'open'; key: Uint8Array; items: OpenItem[] };

/** A job as posted: its bytes are a whole ArrayBuffer (transferred) or a SharedArrayBuffer region. */
export type CryptoJob = CryptoWork & { id: number; buffer: ArrayBuffer | SharedArrayBuffer; byteOffset: number; byteLength: number };

export interface CryptoReply {
  id: number;
  /** The failure's message only: never the job, whose key it would carry. */
  error?: string;
  buffer?: ArrayBuffer | SharedArrayBuffer;
  tags?: Uint8Array;
  checksums?: Uint32Array;
  failedItem?: number;
  failure?: 'tag' | 'checksum';
}

type Outcome = Omit<CryptoReply, 'id' | 'buffer' | 'error'>;

const CHUNK_BYTES = 64 * 1024;
const TAG_BYTES = 16;

/** The addon's AES-GCM pair, or undefined where it is not asked for, cannot be loaded or lacks it. */
type InPlaceGcm = Required<Pick<NativeAddon, 'gcmSeal' | 'gcmOpen'>>;

function inPlaceGcm(data: CryptoWorkerData | undefined): InPlaceGcm | undefined {
  if (data?.inPlace !== true) return undefined;
  try {
    const { gcmAvailable, gcmSeal, gcmOpen } = loadNativeBinding();
    return gcmAvailable && gcmSeal && gcmOpen ? { gcmSeal, gcmOpen } : undefined;
  } catch {
    return undefined; // no addon here: Node's API writes and reads the same files
  }
}

const crcOf = (bytes: Uint8Array, item: SealItem) => crc32(bytes.subarray(item.offset, item.offset + item.length));

function seal(gcm: InPlaceGcm | undefined, key: Uint8Array, bytes: Uint8Array, items: SealItem[], summed: boolean): Outcome {
  if (gcm) {
    const checksums = summed ? Uint32Array.from(items, (item) => crcOf(bytes, item)) : undefined;
    return { tags: gcm.gcmSeal(key, bytes, items), ...(checksums && { checksums }) };
  }
  const tags = new Uint8Array(TAG_BYTES * items.length);
  const checksums = summed ? new Uint32Array(items.length) : undefined;
  items.forEach((item, i) => {
    const cipher = createCipheriv('aes-256-gcm', key, item.iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(item.aad);
    let checksum = 0;
    for (let at = item.offset, end = item.offset + item.length; at < end; at += CHUNK_BYTES) {
      const plain = bytes.subarray(at, Math.min(at + CHUNK_BYTES, end));
      if (checksums) checksum = crc32(plain, checksum);
      const sealed = cipher.update(plain);
      // GCM is a stream mode: OpenSSL returns exactly as many bytes as it was given.
      if (sealed.length !== plain.length) throw new Error('AES-GCM returned a short chunk');
      bytes.set(sealed, at);
    }
    cipher.final();
    tags.set(cipher.getAuthTag(), TAG_BYTES * i);
    if (checksums) checksums[i] = checksum;
  });
  return { tags, ...(checksums && { checksums }) };
}

/**
 * Decrypts in place. On a failure every item is zeroed before the reply: the caller reads the bytes
 * (shared memory, or the transferred buffer) only after it, so unverified plaintext never reaches it.
 */
function open(gcm: InPlaceGcm | undefined, key: Uint8Array, bytes: Uint8Array, items: OpenItem[]): Outcome {
  if (gcm) {
    const failed = gcm.gcmOpen(key, bytes, items); // zeroes every item on a failure
    if (failed >= 0) return { failedItem: failed, failure: 'tag' };
    const wrong = items.findIndex((item) => item.checksum !== undefined && crcOf(bytes, item) !== item.checksum);
    if (wrong < 0) return { failedItem: -1 };
    for (const item of items) bytes.fill(0, item.offset, item.offset + item.length);
    return { failedItem: wrong, failure: 'checksum' };
  }
  for (const [i, item] of items.entries()) {
    const decipher = createDecipheriv('aes-256-gcm', key, item.iv, { authTagLength: TAG_BYTES });
    decipher.setAAD(item.aad);
    decipher.setAuthTag(item.tag);
    let checksum = 0;
    for (let at = item.offset, end = item.offset + item.length; at < end; at += CHUNK_BYTES) {
      const plain = decipher.update(bytes.subarray(at, Math.min(at + CHUNK_BYTES, end)));
      if (plain.length !== Math.min(CHUNK_BYTES, end - at)) throw new Error('AES-GCM returned a short chunk');
      bytes.set(plain, at);
      if (item.checksum !== undefined) checksum = crc32(plain, checksum);
    }
    let failure: 'tag' | 'checksum' | undefined;
    try {
      decipher.final();
      if (item.checksum !== undefined && checksum !== item.checksum) failure = 'checksum';
    } catch {
      failure = 'tag';
    }
    if (failure !== undefined) {
      bytes.fill(0); // unverified plaintext never leaves this thread
      return { failedItem: i, failure };
    }
  }
  return { failedItem: -1 };
}

function serve(port: NonNullable<typeof parentPort>, gcm: InPlaceGcm | undefined): void {
  port.on('message', (job: CryptoJob) => {
    try {
      const bytes = new Uint8Array(job.buffer, job.byteOffset, job.byteLength);
      const outcome =
        job.op === 'seal' ? seal(gcm, job.key, bytes, job.items, job.checksums !== false) : open(gcm, job.key, bytes, job.items);
      // ArrayBuffers go back by transfer; shared memory is already where the caller can see it.
      const reply: CryptoReply = { id: job.id, buffer: job.buffer, ...outcome };
      port.postMessage(reply, job.buffer instanceof ArrayBuffer ? [job.buffer] : []);
    } catch (err) {
      // Node's crypto messages never carry key bytes; send the message only, never the job.
      const reply: CryptoReply = { id: job.id, error: String((err as Error | undefined)?.message ?? err) };
      port.postMessage(reply);
    } finally {
      job.key.fill(0);
    }
  });
}

// Only as a thread's entry: crypto-pool.ts imports this module's types alone, never its code.
if (!isMainThread && parentPort) serve(parentPort, inPlaceGcm(workerData as CryptoWorkerData | undefined));
