// The one rule for agent ids and tenant names that client, workflows and worker share.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { agentWorkflowId, checkTenantName, isAgentId, isTenantName } from '../../src/identity/agent-identity';

const alnum = fc.constantFrom(...'abcXYZ019');
const idChar = fc.constantFrom(...'abcXYZ019._:-');

describe('agent identity', () => {
  it('accepts exactly ids of 1-128 safe characters that start with a letter or digit', () => {
    fc.assert(
      fc.property(alnum, fc.array(idChar, { maxLength: 127 }), (first, rest) => {
        expect(isAgentId(first + rest.join(''))).toBe(true);
      }),
    );
    for (const bad of ['', '-a', '.a', 'a b', 'a/b', 'é', 'a'.repeat(129), 7, null, undefined]) expect(isAgentId(bad)).toBe(false);
  });

  it('gives each agent its own workflow id', () => {
    fc.assert(
      fc.property(fc.string(), fc.string(), (a, b) => {
        expect(agentWorkflowId(a) === agentWorkflowId(b)).toBe(a === b);
      }),
    );
  });

  it('allows no ":" in tenant names, and refuses bad ones with INVALID_ARGUMENT', () => {
    expect(isTenantName('acme.eu-1')).toBe(true);
    expect(isTenantName('acme:eu')).toBe(false);
    expect(() => checkTenantName('')).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => checkTenantName(42)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });
});
