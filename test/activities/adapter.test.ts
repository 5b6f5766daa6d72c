// The Temporal adapter's own pieces: at-most-once application (the operation journal) and FabricError
// codes carried as non-retryable or retryable application failures.
import type { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';

import { toApplicationFailure } from '../../src/activities/failures';
import { OperationJournal, type Admission } from '../../src/activities/operation-journal';
import { FabricError } from '../../src/fabric/errors';

describe('operation journal', () => {
  const first: Admission = { workflowId: 'kvagent-a', runId: 'run-1', tenant: 'acme', tokenDigest: 'd1' };

  it('applies an operation once, answers retries of the same admission from the record, and forgets failures', async () => {
    const journal = new OperationJournal(2);
    let applied = 0;
    const apply = async () => ++applied;
    const [a, b] = await Promise.all([journal.run('ctx', 'op1', first, apply), journal.run('ctx', 'op1', first, apply)]);
    expect([a, b, applied]).toEqual([1, 1, 1]);
    expect(await journal.recorded('ctx', 'op1', first)).toBe(1);
    await expect(journal.run('ctx', 'op2', first, () => Promise.reject(new Error('no')))).rejects.toThrow('no');
    expect(journal.has('ctx', 'op2')).toBe(false);
    expect(await journal.run('ctx', 'op2', first, apply)).toBe(2);
    await journal.run('ctx', 'op3', first, apply);
    expect(journal.has('ctx', 'op1')).toBe(false); // bounded per context
    expect(journal.has('other', 'op3')).toBe(false);
  });

  it('answers only the admission that recorded an outcome: another run, tenant or token finds nothing', async () => {
    const journal = new OperationJournal();
    await journal.run('ctx', 'op1', first, async () => 'secret');
    for (const other of [{ runId: 'run-2' }, { workflowId: 'kvagent-b' }, { tenant: 'globex' }, { tokenDigest: 'd2' }]) {
      expect(journal.recorded('ctx', 'op1', { ...first, ...other })).toBeUndefined();
    }
    // Applied afresh for the other admission, which then owns the record.
    const second = { ...first, runId: 'run-2' };
    expect(await journal.run('ctx', 'op1', second, async () => 'fresh')).toBe('fresh');
    expect(journal.recorded('ctx', 'op1', first)).toBeUndefined();
  });

  it('keeps only the ending operation of an ended context', async () => {
    const journal = new OperationJournal();
    await journal.run('ctx', 'op1', first, async () => 1);
    await journal.run('ctx', 'op2', first, async () => 2);
    journal.end('ctx', 'op2');
    expect([journal.has('ctx', 'op1'), journal.has('ctx', 'op2')]).toEqual([false, true]);
  });
});

describe('failure codes', () => {
  it("makes permission, integrity and argument errors and a tenant's quota non-retryable, a pool's exhaustion retryable", () => {
    const as = (code: FabricError['code']) => toApplicationFailure(new FabricError(code, 'x')) as ApplicationFailure;
    for (const code of ['PERMISSION_DENIED', 'INTEGRITY', 'INVALID_ARGUMENT', 'STALE_HANDLE', 'RESOURCE_EXHAUSTED'] as const) {
      expect(as(code)).toMatchObject({ type: code, nonRetryable: true });
    }
    for (const code of ['POOL_EXHAUSTED', 'OUT_OF_MEMORY', 'STORAGE_FULL', 'BUSY'] as const) {
      expect(as(code)).toMatchObject({ type: code, nonRetryable: false });
    }
    const other = new Error('plain');
    expect(toApplicationFailure(other)).toBe(other);
  });
});
