// How many leading tokens two token sequences agree on: what a completion continues (src/ai-sdk, the engine's hot copy).
export function sharedPrefix(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const end = Math.min(a.length, b.length);
  let i = 0;
  while (i < end && a[i] === b[i]) i++;
  return i;
}
