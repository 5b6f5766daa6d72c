// The operations table is the one list of what an agent can undergo: every update, activity, admitted
// action and caller right must be one of its rows, under the row's own word. A new update, activity or
// right that is not in the table (or a row with nothing behind it) fails here.
import { describe, expect, it } from 'vitest';

import { createActivities } from '../../src/activities';
import type { AgentMemory } from '../../src/agent-memory/agent-memory';
import { CUSTODY_ACTIONS, RIGHT_FOR } from '../../src/agent-memory/capability-check';
import { OPERATIONS, OPERATION_NAMES, type Operation } from '../../src/operations/operations';
import { CALLER_RIGHTS, CUSTODY } from '../../src/security/claims';
import * as definitions from '../../src/workflows/definitions';

const rows = Object.entries(OPERATIONS) as [Operation, (typeof OPERATIONS)[Operation]][];

describe('the operations table', () => {
  it('names every update the agent workflow defines, and nothing else', () => {
    const updates = (Object.values(definitions) as unknown[])
      .filter(
        (value): value is { type: 'update'; name: string } =>
          typeof value === 'object' && value !== null && (value as { type?: unknown }).type === 'update',
      )
      .map((update) => update.name)
      .sort();
    expect(updates).toEqual(
      rows
        .filter(([, row]) => row.update)
        .map(([name]) => name)
        .sort(),
    );
  });

  it('names every activity a worker registers, each on the queue its row says', () => {
    const { placement, holder, local } = createActivities({ memory: {} as AgentMemory, holder: 'queue' });
    expect(Object.keys(placement).sort()).toEqual(
      rows
        .filter(([, row]) => row.queue === 'placement')
        .map(([name]) => name)
        .sort(),
    );
    expect(Object.keys(holder).sort()).toEqual(
      rows
        .filter(([, row]) => row.queue === 'holder')
        .map(([name]) => name)
        .sort(),
    );
    expect(Object.keys(local).sort()).toEqual(rows.flatMap(([, row]) => ('local' in row ? [row.local] : [])).sort());
  });

  it('gives the worker its rights and custody from the rows', () => {
    for (const name of OPERATION_NAMES) {
      expect(RIGHT_FOR[name]).toBe(OPERATIONS[name].right);
      expect(CUSTODY_ACTIONS.has(name)).toBe(OPERATIONS[name].custody);
    }
    expect(Object.keys(RIGHT_FOR).sort()).toEqual([...OPERATION_NAMES].sort());
  });

  it('has a caller right for every row a caller may ask for, and no right no row needs', () => {
    const callers = rows.filter(([, row]) => row.right !== CUSTODY);
    expect([...new Set(callers.map(([, row]) => row.right))].sort()).toEqual([...CALLER_RIGHTS].sort());
  });

  it("admits only the custodian to the updates that have no activity (a worker's holderLeft)", () => {
    const workflowOnly = rows.filter(([, row]) => row.queue === 'workflow');
    expect(workflowOnly.map(([name]) => name)).toEqual(['holderLeft']);
    for (const [, row] of workflowOnly) expect(row).toMatchObject({ update: true, right: CUSTODY, custody: true });
  });
});
