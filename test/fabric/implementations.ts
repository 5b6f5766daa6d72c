// Both allocator implementations, so each test file runs the same cases against the two of them.
import { NativeAllocator, type KvAllocator, type PoolOptions } from '../../src/fabric';
import { TsAllocator } from './ts-allocator';

export interface Implementation {
  name: 'native' | 'ts';
  create(options: PoolOptions): KvAllocator;
}

export const implementations: Implementation[] = [
  { name: 'native', create: (options) => new NativeAllocator(options) },
  { name: 'ts', create: (options) => new TsAllocator(options) },
];

/** 8 bytes per token (2 layers x K,V x 1 head x 2 dims x 1 byte), 4 tokens per block: 32-byte blocks. */
export const tinyShape = { layers: 2, kvHeads: 1, headDim: 2, dtypeBytes: 1 };
export const TINY_BYTES_PER_TOKEN = 8;

/** Token-major bytes whose values depend on seed and position, never 0. */
export function tokenBytes(tokens: number, seed: number, bytesPerToken = TINY_BYTES_PER_TOKEN): Uint8Array {
  const out = new Uint8Array(tokens * bytesPerToken);
  for (let i = 0; i < out.length; i++) out[i] = 1 + ((seed * 31 + i * 7) % 255);
  return out;
}

/** Byte equality that stays fast on megabytes (deep equality walks element by element) and names the first difference. */
export function expectSameBytes(actual: Uint8Array, expected: Uint8Array): void {
  if (
    Buffer.from(actual.buffer, actual.byteOffset, actual.byteLength).equals(
      Buffer.from(expected.buffer, expected.byteOffset, expected.byteLength),
    )
  )
    return;
  let at = 0;
  while (at < Math.min(actual.length, expected.length) && actual[at] === expected[at]) at++;
  throw new Error(`bytes differ at offset ${at} (lengths ${actual.length} and ${expected.length})`);
}

export function concatBytes(...parts: Uint8Array[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts));
}
