// The allocator's INTEGRITY failures name a page ("page 3 does not match its checksum"); the tiers know
// which context that page belongs to, and add it so the message says what to restore or release.
import { FabricError, isFabricError } from '../fabric/errors';

export function namingContext(err: unknown, contextId: string): unknown {
  if (!isFabricError(err, 'INTEGRITY')) return err;
  const named = err.message.includes(`context ${contextId}`) || err.message.includes(`context '${contextId}'`);
  return named ? err : new FabricError('INTEGRITY', `context ${contextId}: ${err.message}`);
}

/** Runs a move of one context, naming the context in an INTEGRITY failure. */
export async function moveNamed<T>(contextId: string, move: () => Promise<T>): Promise<T> {
  try {
    return await move();
  } catch (err) {
    throw namingContext(err, contextId);
  }
}
