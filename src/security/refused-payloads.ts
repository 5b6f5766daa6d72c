// Temporal decodes every payload of a workflow activation in one go, before any workflow code runs: a
// codec that throws there fails the whole workflow task, and again at every retry, so one hostile payload
// (a plaintext update from a client without the codec keys) would stall the agent it was sent to. This
// codec decodes one payload at a time and puts a refused payload in place of each one its inner codec
// refuses (a FabricError). A refused payload's encoding names the refusal and no payload converter reads
// it, so the failure comes where the value is used: the update that carried it is rejected before its
// handler runs and leaves nothing in the history, a query fails, a workflow's input never converts. The
// rest of the activation goes on.
import { METADATA_ENCODING_KEY, type Payload, type PayloadCodec } from '@temporalio/common';

import { type FabricError, isFabricError } from '../fabric/errors';

/** Converting a refused payload fails with `Unknown encoding: kvfabric-refused <CODE> (<why>)`. */
export const REFUSED_ENCODING_PREFIX = 'kvfabric-refused';

export class RefusalIsolatingCodec implements PayloadCodec {
  constructor(
    private readonly inner: PayloadCodec,
    /** Told each refusal (a worker logs it: the failure it causes is sealed, and names no key in the log). */
    private readonly onRefusal?: (err: FabricError) => void,
  ) {}

  encode(payloads: Payload[]): Promise<Payload[]> {
    return this.inner.encode(payloads);
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return Promise.all(
      payloads.map(async (payload) => {
        try {
          return (await this.inner.decode([payload]))[0]!;
        } catch (err) {
          if (!isFabricError(err)) throw err;
          this.onRefusal?.(err);
          return refusedPayload(err);
        }
      }),
    );
  }
}

export function refusedPayload(err: FabricError): Payload {
  return {
    metadata: { [METADATA_ENCODING_KEY]: Buffer.from(`${REFUSED_ENCODING_PREFIX} ${err.code} (${err.message})`) },
    data: new Uint8Array(),
  };
}
