// The worker's log line for a payload its codec refused. The refusal itself travels in a failure that is
// sealed like every failure, so the SDK's own log line of the failed workflow task reads only
// `Encoded failure`; this line names the key id the payload was sealed with and the keys this worker
// holds. A payload's header is anyone's to write, so the ids are printed escaped, and one reason is
// logged at most once a minute: a client retrying, or a stranger sending junk, cannot flood the log.
import type { Logger } from '@temporalio/common';

import type { FabricError } from '../fabric/errors';
import { printable, quotedId } from '../identity/printable-id';

const REPEAT_AFTER_MS = 60_000;
/** Distinct reasons remembered within a minute; past this, new ones wait for the next minute. */
const MAX_REMEMBERED = 100;

/** A refusal logger for dataConverterOf's `onRefusal`; `heldKeyIds`: this worker's payload codec key ids. */
export function refusalLog(logger: Logger, heldKeyIds: readonly string[]): (err: FabricError) => void {
  const lastLogged = new Map<string, number>();
  const held = heldKeyIds.map(quotedId).join(', ');
  return (err) => {
    const now = Date.now();
    const last = lastLogged.get(err.message);
    if (last !== undefined && now - last < REPEAT_AFTER_MS) return;
    for (const [reason, at] of lastLogged) if (now - at >= REPEAT_AFTER_MS) lastLogged.delete(reason);
    if (lastLogged.size >= MAX_REMEMBERED) return;
    lastLogged.set(err.message, now);
    logger.warn(
      `kvfabric refused a payload (${err.code}): ${printable(err.message)}; ` +
        `this worker holds payload codec key${heldKeyIds.length === 1 ? '' : 's'} ${held}: ` +
        'clients and workers need the same payload codec keys (KVFABRIC_CODEC_KEYS or KVFABRIC_CODEC_KEYS_FILE)',
    );
  };
}
