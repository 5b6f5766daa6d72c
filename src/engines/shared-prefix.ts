// How two token sequences compare: what a completion continues (src/ai-sdk, the engine's hot copy), and
// whether an engine holds exactly the tokens a caller expects.

/** How many leading tokens two token sequences agree on. */
export function sharedPrefix(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const end = Math.min(a.length, b.length);
  let i = 0;
  while (i < end && a[i] === b[i]) i++;
  return i;
}

/** Whether two token sequences are the same tokens. */
export function sameTokens(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  return a.length === b.length && sharedPrefix(a, b) === a.length;
}
