// The Temporal adapter's own pieces: at-most-once application (the operation journal) and FabricError
// codes carried as non-retryable or retryable application failures.
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';

import { toApplicationFailure } from '../../src/activities/failures';
import { OperationJournal } from '../../src/activities/operation-journal';
import { FabricError } from '../../src/fabric/errors';

describe('operation journal', () => {
  it('applies an operation once, answers retries from the record, and forgets failures', async () => {
    const journal = new OperationJournal(2);
    let applied = 0;
    const apply = async () => ++applied;
    const [a, b] = await Promise.all([journal.run('ctx', 'op1', apply), journal.run('ctx', 'op1', apply)]);
    expect([a, b, applied]).toEqual([1, 1, 1]);
    expect(await journal.run('ctx', 'op1', apply)).toBe(1);
    await expect(journal.run('ctx', 'op2', () => Promise.reject(new Error('no')))).rejects.toThrow('no');
    expect(journal.has('ctx', 'op2')).toBe(false);
    expect(await journal.run('ctx', 'op2', apply)).toBe(2);
    await journal.run('ctx', 'op3', apply);
    expect(journal.has('ctx', 'op1')).toBe(false); // bounded per context
    expect(journal.has('other', 'op3')).toBe(false);
  });
});

describe('failure codes', () => {
  it('makes permission, integrity and argument errors non-retryable, exhaustion retryable', () => {
    const as = (code: FabricError['code']) => toApplicationFailure(new FabricError(code, 'x')) as ApplicationFailure;
    for (const code of ['PERMISSION_DENIED', 'INTEGRITY', 'INVALID_ARGUMENT', 'STALE_HANDLE'] as const) {
      expect(as(code)).toMatchObject({ type: code, nonRetryable: true });
    }
    for (const code of ['POOL_EXHAUSTED', 'OUT_OF_MEMORY', 'STORAGE_FULL', 'BUSY'] as const) {
      expect(as(code)).toMatchObject({ type: code, nonRetryable: false });
    }
    const other = new Error('plain');
    expect(toApplicationFailure(other)).toBe(other);
  });
});
