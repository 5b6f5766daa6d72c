// Shared prefixes through the cold tier when workers share only an S3 bucket (SeaweedFS): when two
// workers publish the same prefix at once, the bucket's conditional manifest writes keep one copy and
// neither fails; a worker adopts it byte for byte; and the copies go with forget(), segments included.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import type { S3BlobStore } from '../../src/blob-store/s3/s3-blob-store';
import { coldPrefixIdOf } from '../../src/prefix-sharing/prefix-names';
import { expectSameBytes, tokenBytes } from '../fabric/implementations';
import { startSeaweedfs, type SeaweedfsServer } from '../support/seaweedfs';
import { keysOf, openColdWorkers, publishHolder, TPB } from './cold-workers-fixture';

let server: SeaweedfsServer;
let store: S3BlobStore;
let opened: Awaited<ReturnType<typeof openColdWorkers>> | undefined;

beforeAll(async () => {
  server = await startSeaweedfs();
  store = server.store({ prefix: 'prefixes/' });
}, 120_000);
afterEach(async () => {
  await opened?.close();
  opened = undefined;
});
afterAll(async () => {
  await store?.close();
  await server?.close();
});

describe('cold prefixes in a bucket', () => {
  it('two workers publishing one prefix at once keep one copy, which another adopts; forget removes every object', async () => {
    opened = await openColdWorkers(2, store);
    const [first, second] = opened.workers;
    const tokens = Uint32Array.from({ length: 6 * TPB }, (_, i) => 300 + i);
    const kv = tokenBytes(tokens.length, 11);
    // Both write the same names at once: the bucket's create-only manifest writes let one win each, and neither fails.
    const [keys] = await Promise.all([publishHolder(first!, tokens, kv), publishHolder(second!, tokens, kv)]);
    const names = (await first!.cold.listManifests()).filter((id) => id.startsWith('prefix/'));
    expect(names.sort()).toEqual([6, 4, 2, 1].map((blocks) => coldPrefixIdOf(keys[blocks - 1]!)).sort());

    // The second worker lets its holder go and adopts the prefix back from the bucket.
    const holderId = second!.tiers.contextIds()[0]!;
    await second!.tiers.release(holderId);
    const adopted = await second!.prefixes.adopt(1, keysOf(tokens), tokens, 0);
    expect(adopted).toEqual({ holderId, blocks: 6 });
    expectSameBytes(await second!.tiers.read(holderId, 0, tokens.length), kv);

    await first!.tiers.release(holderId);
    await first!.prefixes.forget(keys);
    expect((await first!.cold.listManifests()).filter((id) => id.startsWith('prefix/'))).toEqual([]);
    await second!.tiers.release(holderId);
    expect(await first!.cold.listSegments()).toEqual([]);
  });
});
