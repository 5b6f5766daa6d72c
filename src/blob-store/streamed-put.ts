// A put whose bytes arrive in pieces, at any offsets, while the blob is still being produced: the cold
// tier seals a segment's blocks on its crypto threads and hands each run over as it is sealed, so a store
// that can take parts (S3's multipart upload) sends them while later ones are still being sealed. Either
// way the blob appears whole, under its condition, at complete(), or never. A store without parts gets
// bufferedPut: the pieces assembled in memory and put once at the end, as before.
import { FabricError } from '../fabric/errors';
import type { BlobCondition, BlobStore, BlobVersion } from './blob-store';

/** One blob of a size known up front, written in pieces; bytes never written are zeros. */
export interface StreamedPut {
  /**
   * `bytes` at `offset`. Copied before the promise resolves, so the caller may reuse its memory then; it may
   * wait (back-pressure) while the store's parts in flight are at their limit. Rejects once the put failed.
   */
  write(bytes: Uint8Array, offset: number): Promise<void>;
  /** Sends what is left and makes the blob visible whole if the condition holds; returns its version. */
  complete(): Promise<BlobVersion>;
  /** Drops whatever was sent: the blob never appears. Safe to call after a failure, or twice. */
  abort(): Promise<void>;
}

/** A blob store that takes a put in pieces (the S3 backend). */
export interface StreamedPuts {
  startPut(key: string, size: number, condition?: BlobCondition): Promise<StreamedPut>;
}

export function hasStreamedPuts(store: object): store is StreamedPuts {
  return typeof (store as Partial<StreamedPuts>).startPut === 'function';
}

/** `size` bytes assembled in memory and put once, at complete(). */
export function bufferedPut(store: BlobStore, key: string, size: number, condition?: BlobCondition): StreamedPut {
  const bytes = Buffer.alloc(size);
  return {
    write: async (piece, offset) => {
      checkPiece(key, size, piece, offset);
      bytes.set(piece, offset);
    },
    complete: () => store.put(key, bytes, condition),
    abort: async () => undefined,
  };
}

/** INVALID_STATE for a piece outside the blob: a writer's bug, never the store's. */
export function checkPiece(key: string, size: number, piece: Uint8Array, offset: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0 || offset + piece.byteLength > size) {
    throw new FabricError('INVALID_STATE', `blob ${key}: a write of ${piece.byteLength} bytes at ${offset} lies past its ${size} bytes`);
  }
}
