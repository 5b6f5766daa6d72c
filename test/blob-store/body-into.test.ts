// copyBodyInto (the S3 store's getInto): a response body copied chunk by chunk into the caller's memory.
// A body longer than the memory, or one whose connection drops mid-way, fails; a short one returns its count.
import { PassThrough, Readable } from 'node:stream';

import { describe, expect, it } from 'vitest';

import { copyBodyInto } from '../../src/blob-store/s3/body-into';
import { isFabricError } from '../../src/fabric/errors';

const chunks = (...sizes: number[]) => sizes.map((size, i) => Buffer.alloc(size, i + 1));

describe('copyBodyInto', () => {
  it('copies every chunk to its place and returns the count', async () => {
    const into = new Uint8Array(10);
    expect(await copyBodyInto(Readable.from(chunks(3, 4, 3)), into, 'reading')).toBe(10);
    expect([...into]).toEqual([1, 1, 1, 2, 2, 2, 2, 3, 3, 3]);
  });

  it('returns fewer bytes for a body that ends early, and none for no body', async () => {
    expect(await copyBodyInto(Readable.from(chunks(2, 2)), new Uint8Array(10), 'reading')).toBe(4);
    expect(await copyBodyInto(undefined, new Uint8Array(10), 'reading')).toBe(0);
  });

  it('fails a body longer than the memory asked for, and stops reading it', async () => {
    const body = Readable.from(chunks(6, 6));
    const failed = await copyBodyInto(body, new Uint8Array(10), 'reading blob k').catch((err: unknown) => err);
    expect(isFabricError(failed, 'UNAVAILABLE') && /more than the 10 bytes/.test(failed.message)).toBe(true);
    expect(body.destroyed).toBe(true);
  });

  it('fails a body whose stream errs or closes mid-way', async () => {
    const erring = new PassThrough();
    const erred = copyBodyInto(erring, new Uint8Array(10), 'reading').catch((err: unknown) => err);
    erring.write(Buffer.alloc(3));
    erring.destroy(new Error('socket hang up'));
    expect(((await erred) as Error).message).toBe('socket hang up');
    const closing = new PassThrough();
    const closed = copyBodyInto(closing, new Uint8Array(10), 'reading').catch((err: unknown) => err);
    closing.write(Buffer.alloc(3));
    closing.destroy();
    expect(isFabricError(await closed, 'UNAVAILABLE')).toBe(true);
  });

  it('takes a body that is not a Node stream whole', async () => {
    const into = new Uint8Array(4);
    const body = { transformToByteArray: async () => new Uint8Array([9, 8, 7]) };
    expect(await copyBodyInto(body, into, 'reading')).toBe(3);
    expect([...into]).toEqual([9, 8, 7, 0]);
    const tooLong = { transformToByteArray: async () => new Uint8Array(5) };
    expect(isFabricError(await copyBodyInto(tooLong, into, 'reading').catch((err: unknown) => err), 'UNAVAILABLE')).toBe(true);
  });
});
