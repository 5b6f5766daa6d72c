// Source of the crypto worker thread, started with `new Worker(source, { eval: true })`. It is a string,
// not a file, because tests and tools run TypeScript sources through tsx and vitest, which do not
// transpile a `new Worker(file)` entry, while the compiled package (tsc) copies no .js files: an eval'd
// CommonJS string runs the same in all three. Keep it plain ES2022 with only Node built-ins.
//
// The worker knows nothing of the file formats: it seals or opens byte ranges of one buffer (shared, or
// transferred) in place, with the IV, associated data, tag and checksum that crypto-pool's caller
// computed. It works in 64 KiB chunks: OpenSSL's output for a chunk is a small, cache-hot allocation
// copied straight back, where a whole 2 MiB block would be fresh memory to fault in (which costs more
// than AES-GCM), and each chunk is checksummed (when asked) while it is still in cache.

export const CRYPTO_WORKER_SOURCE = String.raw`
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const { createCipheriv, createDecipheriv } = require('node:crypto');
const { crc32 } = require('node:zlib');

const CHUNK_BYTES = 64 * 1024;
const TAG_BYTES = 16;

// AES-GCM in place through the addon (native/src/addon/aes_gcm.cc), when the pool names it and it offers
// it; otherwise Node's crypto API, which returns a new buffer per chunk that is copied back.
const inPlace = (() => {
  try {
    const addon = workerData && workerData.addon ? require(workerData.addon) : undefined;
    return addon && addon.gcmAvailable ? addon : undefined;
  } catch {
    return undefined;
  }
})();

const crcOf = (bytes, item) => crc32(bytes.subarray(item.offset, item.offset + item.length));

function seal(key, bytes, items, summed) {
  if (inPlace) {
    const checksums = summed ? Uint32Array.from(items, (item) => crcOf(bytes, item)) : undefined;
    return { tags: inPlace.gcmSeal(key, bytes, items), checksums };
  }
  const tags = new Uint8Array(TAG_BYTES * items.length);
  const checksums = summed ? new Uint32Array(items.length) : undefined;
  items.forEach((item, i) => {
    const cipher = createCipheriv('aes-256-gcm', key, item.iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(item.aad);
    let checksum = 0;
    for (let at = item.offset, end = item.offset + item.length; at < end; at += CHUNK_BYTES) {
      const plain = bytes.subarray(at, Math.min(at + CHUNK_BYTES, end));
      if (summed) checksum = crc32(plain, checksum);
      const sealed = cipher.update(plain);
      // GCM is a stream mode: OpenSSL returns exactly as many bytes as it was given.
      if (sealed.length !== plain.length) throw new Error('AES-GCM returned a short chunk');
      bytes.set(sealed, at);
    }
    cipher.final();
    tags.set(cipher.getAuthTag(), TAG_BYTES * i);
    if (summed) checksums[i] = checksum;
  });
  return { tags, checksums };
}

// Decrypts in place. On a failure every item is zeroed before the reply: the caller reads the bytes
// (shared memory, or the transferred buffer) only after it, so unverified plaintext never reaches it.
function open(key, bytes, items) {
  if (inPlace) {
    const failed = inPlace.gcmOpen(key, bytes, items); // zeroes every item on a failure
    if (failed >= 0) return { failedItem: failed, failure: 'tag' };
    const wrong = items.findIndex((item) => item.checksum !== undefined && crcOf(bytes, item) !== item.checksum);
    if (wrong < 0) return { failedItem: -1 };
    for (const item of items) bytes.fill(0, item.offset, item.offset + item.length);
    return { failedItem: wrong, failure: 'checksum' };
  }
  const output = bytes;
  for (let i = 0; i < items.length; i++) {
    const item = items[i];
    const decipher = createDecipheriv('aes-256-gcm', key, item.iv, { authTagLength: TAG_BYTES });
    decipher.setAAD(item.aad);
    decipher.setAuthTag(item.tag);
    let checksum = 0;
    for (let at = item.offset, end = item.offset + item.length; at < end; at += CHUNK_BYTES) {
      const plain = decipher.update(bytes.subarray(at, Math.min(at + CHUNK_BYTES, end)));
      if (plain.length !== Math.min(CHUNK_BYTES, end - at)) throw new Error('AES-GCM returned a short chunk');
      output.set(plain, at);
      if (item.checksum !== undefined) checksum = crc32(plain, checksum);
    }
    let failure;
    try {
      decipher.final();
      if (item.checksum !== undefined && checksum !== item.checksum) failure = 'checksum';
    } catch {
      failure = 'tag';
    }
    if (failure !== undefined) {
      // Unverified plaintext never leaves this thread.
      output.fill(0);
      return { failedItem: i, failure };
    }
  }
  return { failedItem: -1 };
}

parentPort.on('message', (job) => {
  try {
    const bytes = new Uint8Array(job.buffer, job.byteOffset, job.byteLength);
    const transfer = job.buffer instanceof ArrayBuffer ? [job.buffer] : [];
    let result;
    if (job.op === 'seal') {
      result = seal(job.key, bytes, job.items, job.checksums !== false);
    } else {
      result = open(job.key, bytes, job.items);
    }
    // ArrayBuffers go back by transfer; shared memory is already where the caller can see it.
    parentPort.postMessage({ id: job.id, buffer: job.buffer, ...result }, transfer);
  } catch (err) {
    // Node's crypto messages never carry key bytes; send the message only, never the job.
    parentPort.postMessage({ id: job.id, error: String((err && err.message) || err) });
  } finally {
    // This thread's copy of the data key.
    job.key.fill(0);
  }
});
`;
