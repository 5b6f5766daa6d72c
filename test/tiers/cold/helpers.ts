// Assertions and paths shared by the cold-tier tests; the test data itself is in test-data.ts.
import fs from 'node:fs';
import path from 'node:path';

import { expect } from 'vitest';

import { FabricError, type ErrorCode } from '../../../src/fabric/errors';
import { ColdStore, type KeyRing } from '../../../src/tiers/cold';
import { sameBytes } from './test-data';

export * from './test-data';

export function expectBlocks(actual: Uint8Array[], expected: Uint8Array[]): void {
  expect(actual.length).toBe(expected.length);
  actual.forEach((block, i) => expect(sameBytes(block, expected[i]!), `block ${i} differs`).toBe(true));
}

export async function expectCode(promise: Promise<unknown>, code: ErrorCode, messagePart?: string | RegExp): Promise<FabricError> {
  let caught: unknown;
  try {
    await promise;
  } catch (err) {
    caught = err;
  }
  expect(caught, `expected FabricError ${code}`).toBeInstanceOf(FabricError);
  const err = caught as FabricError;
  expect(err.code, err.message).toBe(code);
  if (messagePart !== undefined) expect(err.message).toMatch(messagePart);
  return err;
}

export function segmentPath(directory: string, segmentId: string): string {
  return path.join(directory, 'segments', `${segmentId}.seg`);
}

export function manifestPath(directory: string, contextId: string): string {
  return path.join(directory, 'manifests', `${contextId}.manifest`);
}

export function filesUnder(directory: string): string[] {
  return fs.readdirSync(directory, { recursive: true, encoding: 'utf8' }).sort();
}

export async function openStore(
  directory: string,
  keyRing: KeyRing,
  extra: Partial<Parameters<typeof ColdStore.open>[0]> = {},
): Promise<ColdStore> {
  return ColdStore.open({ directory, keyRing, cryptoThreads: 2, ...extra });
}
