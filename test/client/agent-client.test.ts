// AgentClient's checks on the client side, before any workflow exists: bad agent ids and tenant names are
// refused with typed errors and nothing is sent (the Client here has a lazy connection to nowhere), and
// minted capabilities are bound to the agent's own workflow.
import { Client } from '@temporalio/client';
import { describe, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { CapabilityIssuer, readClaimsUnverified } from '../../src/security/capability-issuer';
import { TEST_SIGNING_KEYS } from '../security/test-keys';

function offlineClient(): AgentClient {
  return new AgentClient(new Client(), 'kvfabric', { issuer: new CapabilityIssuer(TEST_SIGNING_KEYS) });
}

describe('AgentClient before any workflow', () => {
  it.each([
    ['an empty agent id', { agentId: '', tenant: 'acme' }],
    ['an agent id with a space', { agentId: 'a b', tenant: 'acme' }],
    ['an agent id of 129 characters', { agentId: 'a'.repeat(129), tenant: 'acme' }],
    ['a tenant with a slash', { agentId: 'a', tenant: 'ac/me' }],
    ['a tenant of 64 characters', { agentId: 'a', tenant: 't'.repeat(64) }],
  ])('refuses %s with INVALID_ARGUMENT', async (_what, options) => {
    await expect(offlineClient().start(options)).rejects.toMatchObject({ name: 'FabricError', code: 'INVALID_ARGUMENT' });
  });

  it('mints capabilities bound to the agent, its tenant and its own workflow', () => {
    const claims = readClaimsUnverified(offlineClient().mintCapability('planner', 'acme'));
    expect(claims).toMatchObject({ sub: 'planner', ctx: 'planner', ten: 'acme', wf: agentWorkflowId('planner') });
  });
});
