// The data converter every kvfabric process uses with Temporal (client, worker, replay): the default
// payload conversion, failures with their messages moved into payloads, then the encryption codec over
// all of it, so nothing leaves the process in plaintext and nothing comes in that a codec key did not
// seal: a client without the codec keys cannot start a workflow, or send an update, that a worker acts
// on. What the codec refuses fails where it is used, not the whole workflow task (refused-payloads.ts).
import { existsSync } from 'node:fs';
import { extname, join } from 'node:path';

import type { DataConverter } from '@temporalio/common';

import type { FabricError } from '../fabric/errors';
import { type CodecKeyRing, EncryptionCodec } from './payload-codec';
import { RefusalIsolatingCodec } from './refused-payloads';

/** `onRefusal` is told each payload the codec refuses (a worker logs them). */
export function dataConverterOf(ring: CodecKeyRing, onRefusal?: (err: FabricError) => void): DataConverter {
  return {
    payloadCodecs: [new RefusalIsolatingCodec(new EncryptionCodec(ring), onRefusal)],
    failureConverterPath: failureConverterPath(),
  };
}

/** failure-converter beside this file, in this file's language: .ts from sources, .js compiled (dist/). */
export function failureConverterPath(): string {
  const path = join(__dirname, `failure-converter${extname(__filename)}`);
  if (!existsSync(path)) throw new Error(`failure converter not found at ${path}`);
  return path;
}
