// A GET's response body copied into memory the caller gives, chunk by chunk as it arrives (getInto): no
// buffer for the whole body, none joined from its chunks. A body that ends early is returned short (the
// caller compares the count); one longer than the memory, or cut off mid-way, fails.
import type { Readable } from 'node:stream';

import { FabricError } from '../../fabric/errors';

interface WholeBody {
  transformToByteArray(): Promise<Uint8Array>;
}

/** Copies `body` into `into` from its start; returns the bytes copied. `what` names the read for errors. */
export async function copyBodyInto(body: unknown, into: Uint8Array, what: string): Promise<number> {
  if (body === undefined || body === null) return 0;
  const tooLong = () => new FabricError('UNAVAILABLE', `${what}: the store sent more than the ${into.byteLength} bytes asked for`);
  if (typeof (body as Partial<Readable>).on !== 'function') {
    // Not a Node stream (another runtime's body): whole, then copied.
    const bytes = await (body as WholeBody).transformToByteArray();
    if (bytes.byteLength > into.byteLength) throw tooLong();
    into.set(bytes);
    return bytes.byteLength;
  }
  const stream = body as Readable;
  return new Promise<number>((resolve, reject) => {
    let at = 0;
    const settle = (outcome: () => void) => {
      stream.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
      outcome();
    };
    const onData = (chunk: Uint8Array) => {
      if (at + chunk.byteLength > into.byteLength) {
        stream.destroy();
        settle(() => reject(tooLong()));
        return;
      }
      into.set(chunk, at);
      at += chunk.byteLength;
    };
    const onEnd = () => settle(() => resolve(at));
    const onError = (err: Error) => settle(() => reject(err));
    // Closed without an end or an error (a connection dropped mid-body): not a short blob, a failed read.
    const onClose = () => settle(() => reject(new FabricError('UNAVAILABLE', `${what}: the connection closed mid-body`)));
    stream.on('data', onData).once('end', onEnd).once('error', onError).once('close', onClose);
  });
}
