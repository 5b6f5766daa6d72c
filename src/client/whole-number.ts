// A whole number given as text (a flag, an environment variable), read one way by kvfabric-worker and
// the kvfabric CLI alike: digits only, so "1e3", "0x10", " 7" and "-1" are refused rather than read as
// something the operator did not write.
import { FabricError } from '../fabric/errors';

/** `text` as a whole number in [min, max]; INVALID_ARGUMENT naming `setting` otherwise. */
export function wholeNumber(text: string, setting: string, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  const value = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`;
    throw new FabricError('INVALID_ARGUMENT', `${setting} must be a whole number ${range}, got '${text}'`);
  }
  return value;
}
