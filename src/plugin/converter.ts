// kvfabric's data converter added to one a user already has: kvfabric's encryption codec after the
// user's own codecs, and kvfabric's failure converter (it moves failure messages into sealed payloads;
// a user's own failure converter would let them out in plaintext, so kvfabric's wins).
import type { DataConverter } from '@temporalio/common';

import type { FabricError } from '../fabric/errors';
import { dataConverterOf } from '../security/data-converter';
import type { CodecKeyRing } from '../security/payload-codec';

export function withKvFabricConverter(
  existing: DataConverter | undefined,
  codec: CodecKeyRing,
  onRefusal?: (err: FabricError) => void,
): DataConverter {
  const ours = dataConverterOf(codec, onRefusal);
  return { ...existing, ...ours, payloadCodecs: [...(existing?.payloadCodecs ?? []), ...(ours.payloadCodecs ?? [])] };
}
