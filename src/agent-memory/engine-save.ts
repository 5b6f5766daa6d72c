// An engine's KV into the pages after a call (a model turn, an AI SDK call), off the call's path: the
// engine's rows of the tokens the pages lack are appended with the context's note, then, when asked, the
// durable copy is written. Only to the incarnation of the context the call ran on: one freed meanwhile,
// and perhaps made again under the same id for someone else, gets nothing. Pages that changed meanwhile,
// or an engine that let go of the context, stay as they are: whatever rebuilds the context (the
// workflow's tail, the next prompt) still does.
import type { Engine } from '../engines/engine';
import { sameTokens } from '../engines/shared-prefix';
import { FabricError, isFabricError } from '../fabric/errors';
import type { ContextHandle } from '../fabric/types';
import type { ContextAttachment } from '../tiers/cold';
import type { TieredMemory } from '../tiers/tiered-memory';

export type SaveTiers = Pick<TieredMemory, 'append' | 'contextStats' | 'create' | 'handle' | 'has' | 'release' | 'spill'>;

export interface EngineSave {
  tiers: SaveTiers;
  engine: Engine;
  contextId: string;
  /** The incarnation the call ran on. */
  handle: ContextHandle;
  /** Tokens the pages held when the call ran: the pages must still hold exactly these. */
  held: number;
  /** The whole context after the call. */
  tokens: Uint32Array;
  /** The pages are not a prefix of `tokens` (a prompt that departed from them): they are made again from all of it. */
  remake?: boolean;
  /** What the note holds beside the engine's fingerprint and the token ids (which this adds). */
  note: object;
  /** Write the durable copy after the append. */
  checkpoint: boolean;
}

/**
 * Nothing saved (another incarnation, pages that moved on, an engine that let go); or the bytes appended,
 * and whether the disk took the durable copy.
 */
export type EngineSaveResult = { saved: false } | { saved: true; bytes: number; durable?: boolean };

/** Saves the engine's rows of `tokens` past the pages into them (see above). */
export async function saveEngineRows(save: EngineSave): Promise<EngineSaveResult> {
  const { tiers, engine, contextId, handle, held, tokens } = save;
  const sameIncarnation = () => tiers.has(contextId) && tiers.handle(contextId) === handle;
  if (!sameIncarnation() || tiers.contextStats(contextId).tokens !== held) return { saved: false };
  const from = save.remake ? 0 : held;
  let saved: { tokens: Uint32Array; kv: Uint8Array };
  try {
    saved = await engine.save(contextId, from);
  } catch (err) {
    if (isFabricError(err, 'INVALID_STATE')) return { saved: false }; // not hot any more
    throw err;
  }
  if (!sameTokens(saved.tokens, tokens.subarray(from))) {
    throw new FabricError('INTEGRITY', `context ${contextId}: the engine holds other tokens than the call left`);
  }
  if (!sameIncarnation()) return { saved: false };
  const note = { ...save.note, fingerprint: engine.fingerprint, tokens: Array.from(tokens) };
  let into = handle;
  if (save.remake) {
    const tenant = tiers.contextStats(contextId).tenant;
    await tiers.release(contextId);
    tiers.create(contextId, tenant);
    into = tiers.handle(contextId);
  }
  await tiers.append(contextId, saved.kv, note as unknown as ContextAttachment, into);
  if (!save.checkpoint) return { saved: true, bytes: saved.kv.byteLength };
  try {
    await tiers.spill(contextId);
    return { saved: true, bytes: saved.kv.byteLength, durable: true };
  } catch (err) {
    if (!isFabricError(err, 'STORAGE_FULL')) throw err; // the pages stay; the next spill tries again
    return { saved: true, bytes: saved.kv.byteLength, durable: false };
  }
}
