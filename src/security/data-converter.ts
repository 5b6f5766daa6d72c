// The data converter every kvfabric process uses with Temporal (client, worker, replay): the default
// payload conversion, failures with their messages moved into payloads, then the encryption codec over
// all of it, so nothing leaves the process in plaintext.
import { existsSync } from 'node:fs';
import { join } from 'node:path';

import type { DataConverter } from '@temporalio/common';

import { CodecKeyRing, EncryptionCodec } from './payload-codec';

export function dataConverterOf(ring: CodecKeyRing): DataConverter {
  return { payloadCodecs: [new EncryptionCodec(ring)], failureConverterPath: failureConverterPath() };
}

/** failure-converter.js beside this file (sources), or in the sources when running compiled from dist/. */
export function failureConverterPath(): string {
  const candidates = [join(__dirname, 'failure-converter.js'), join(__dirname, '..', '..', '..', 'src', 'security', 'failure-converter.js')];
  const found = candidates.find((path) => existsSync(path));
  if (!found) throw new Error(`failure converter not found at ${candidates.join(' or ')}`);
  return found;
}
