// The data converter every kvfabric process uses with Temporal (client, worker, replay): the default
// payload conversion, failures with their messages moved into payloads, then the encryption codec over
// all of it, so nothing leaves the process in plaintext and nothing comes in that a codec key did not
// seal: a client without the codec keys cannot start a workflow, or send an update, that a worker acts
// on. What the codec refuses fails where it is used, not the whole workflow task (refused-payloads.ts).
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import type { DataConverter } from '@temporalio/common';

import { CodecKeyRing, EncryptionCodec } from './payload-codec';
import { RefusalIsolatingCodec } from './refused-payloads';

export function dataConverterOf(ring: CodecKeyRing): DataConverter {
  return { payloadCodecs: [new RefusalIsolatingCodec(new EncryptionCodec(ring))], failureConverterPath: failureConverterPath() };
}

/** failure-converter.js beside this file (sources), or in the sources when running compiled from dist/. */
export function failureConverterPath(): string {
  const candidates = [join(__dirname, 'failure-converter.js'), join(__dirname, '..', '..', '..', 'src', 'security', 'failure-converter.js')];
  const found = candidates.find((path) => existsSync(path));
  if (!found) throw new Error(`failure converter not found at ${candidates.join(' or ')}`);
  return found;
}
