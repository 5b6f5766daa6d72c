// The context ids of shared prefixes, both named by the key of their last block (prefix-keys.ts): a salted
// hash, so an id tells nothing of the tokens and names one tenant's prefix for one engine setting.
//  - a holder, a worker's own context of the prefix's pages (prefix-index.ts);
//  - a cold prefix, the copy in the cold tier that other workers and later processes adopt
//    (cold-prefixes.ts). Its '/' is in no agent's or run's id (identity/agent-identity.ts), so no caller
//    can name a context that takes its place.

const COLD_PREFIX = 'prefix/';

/** A holder's context id. */
export function holderIdOf(lastKey: string): string {
  return `prefix-${lastKey.slice(0, 48)}`;
}

/** The cold tier's context id of the prefix whose last block has key `lastKey` (the whole key). */
export function coldPrefixIdOf(lastKey: string): string {
  return `${COLD_PREFIX}${lastKey}`;
}

/** Whether a context is a cold prefix being written or adopted (never an agent's). */
export function isColdPrefixId(contextId: string): boolean {
  return contextId.startsWith(COLD_PREFIX);
}
