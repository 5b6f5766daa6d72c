// AgentHandle.wake and AgentClient.wake before anything is sent: a handle that does not hold the agent's
// custodian token, or an instant that is no time, is refused as a typed FabricError, and no connection is
// made (the client's connection is lazy, to an address where nothing listens). The calls that reach a
// workflow: test/temporal/wake-real-model.test.ts (the real model), test/workflows/wake-ups.test.ts.
import { Client, Connection } from '@temporalio/client';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { FabricError } from '../../src/fabric/errors';

/** Nothing listens on port 1: a call that got as far as the network would fail UNAVAILABLE, not INVALID_ARGUMENT. */
const agents = new AgentClient(new Client({ connection: Connection.lazy({ address: '127.0.0.1:1' }) }), 'kvfabric');

describe('a wake-up call', () => {
  it("is refused on a handle without the agent's custodian token, naming where to get one", async () => {
    const handle = agents.agent('helper', 'caller-token');
    const err = await handle.wake(Date.now() + 60_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FabricError);
    expect(err).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect((err as Error).message).toMatch(/custodian token, which this handle lacks.*agents\.agent\(agentId, capability, custodian\)/);
    expect((err as Error).message).not.toContain('caller-token');
  });

  it('keeps the custodian it was given, for the wake-ups of its owner', () => {
    expect(agents.agent('helper', 'caller-token', 'custodian-token').custodian).toBe('custodian-token');
    expect(agents.agent('helper', 'caller-token').custodian).toBeUndefined();
  });

  it('refuses an instant that is no time (an invalid Date, a fraction of a ms, NaN, before the epoch) as INVALID_ARGUMENT', async () => {
    const handle = agents.agent('helper', 'caller-token', 'custodian-token');
    const notTimes = fc.oneof(
      fc.constant(new Date(Number.NaN)),
      fc.double({ noInteger: true }),
      fc.integer({ max: -1 }),
      fc.constantFrom(Number.POSITIVE_INFINITY, Number.MAX_SAFE_INTEGER + 2),
    );
    await fc.assert(
      fc.asyncProperty(notTimes, async (at) => {
        const err = await handle.wake(at).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(FabricError);
        expect(err).toMatchObject({ code: 'INVALID_ARGUMENT' });
        expect((err as Error).message).toMatch(/a wake-up is at a time \(a Date, or whole ms since the epoch\) or null/);
      }),
      { numRuns: 200 },
    );
  });
});
