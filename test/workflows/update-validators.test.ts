// The updates' validators on their own: what each refuses, with which code, before anything is written to
// an agent's history. The same checks run in the workflow (test/temporal covers them end to end).
import fc from 'fast-check';
import { ApplicationFailure } from '@temporalio/workflow';
import { describe, expect, it } from 'vitest';

import { initialState } from '../../src/workflows/agent-state';
import { DEFAULT_AGENT_CONFIG, MAX_MESSAGE_CHARS, type AgentInput, type AgentState } from '../../src/workflows/definitions';
import { checkCredentials, checkFork, checkRenew, checkSuspend, checkTurn } from '../../src/workflows/update-validators';

const INPUT: AgentInput = {
  agentId: 'planner',
  tenant: 'acme',
  capability: 'custodian',
  model: { name: 'tiny', shape: { layers: 1, kvHeads: 1, headDim: 4, dtypeBytes: 2 }, tokensPerBlock: 16 },
  config: DEFAULT_AGENT_CONFIG,
};

function state(overrides: Partial<AgentState> = {}): AgentState {
  return { ...initialState(INPUT), ...overrides };
}

function refusedWith(check: () => void): string | undefined {
  try {
    check();
    return undefined;
  } catch (err) {
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect((err as ApplicationFailure).nonRetryable).toBe(true);
    return (err as ApplicationFailure).type ?? undefined;
  }
}

describe('update validators', () => {
  it('refuse a released agent and a call without a capability', () => {
    expect(refusedWith(() => checkCredentials({ capability: 'token' }, state({ phase: 'released' }), 'planner'))).toBe('INVALID_STATE');
    expect(refusedWith(() => checkCredentials({ capability: '' }, state(), 'planner'))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkCredentials(null as never, state(), 'planner'))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkCredentials({ capability: 'token' }, state(), 'planner'))).toBeUndefined();
  });

  it('take a turn of exactly one of a message and a token count, within bounds', () => {
    const config = { ...DEFAULT_AGENT_CONFIG, maxTurnTokens: 100 };
    expect(refusedWith(() => checkTurn({ capability: 't' }, config))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkTurn({ capability: 't', tokens: 3, message: 'hi' }, config))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkTurn({ capability: 't', message: 'x'.repeat(MAX_MESSAGE_CHARS + 1) }, config))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkTurn({ capability: 't', message: 'hi', generation: { temperature: 3 } }, config))).toBe(
      'INVALID_ARGUMENT',
    );
    expect(refusedWith(() => checkTurn({ capability: 't', message: 'hi', generation: { maxTokens: 0 } }, config))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkTurn({ capability: 't', message: 'hi', generation: { seed: -1 } }, config))).toBe('INVALID_ARGUMENT');
    fc.assert(
      fc.property(fc.oneof(fc.integer({ min: -1000, max: 1000 }), fc.double(), fc.constant(Number.NaN)), (tokens) => {
        const valid = Number.isSafeInteger(tokens) && tokens >= 1 && tokens <= 100;
        expect(refusedWith(() => checkTurn({ capability: 't', tokens }, config))).toBe(valid ? undefined : 'INVALID_ARGUMENT');
      }),
    );
  });

  it('suspend to host or disk only, and never a pinned agent', () => {
    expect(refusedWith(() => checkSuspend({ capability: 't', tier: 'device' as never }, state(), 'planner'))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkSuspend({ capability: 't', tier: 'disk' }, state({ pinned: true }), 'planner'))).toBe('INVALID_STATE');
    expect(refusedWith(() => checkSuspend({ capability: 't', tier: 'host' }, state(), 'planner'))).toBeUndefined();
  });

  it('fork into a valid id other than the parent, with the child token and its custodian', () => {
    const fork = { capability: 't', childId: 'researcher', childCapability: 'child', childCustodian: 'custodian' };
    expect(refusedWith(() => checkFork(fork, 'planner'))).toBeUndefined();
    expect(refusedWith(() => checkFork({ ...fork, childId: 'planner' }, 'planner'))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkFork({ ...fork, childId: '../etc' }, 'planner'))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkFork({ ...fork, childCapability: '' }, 'planner'))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkFork({ ...fork, childCustodian: undefined as never }, 'planner'))).toBe('INVALID_ARGUMENT');
  });

  it('renew with a replacement and its custodian', () => {
    expect(refusedWith(() => checkRenew({ capability: 't', next: 'n', nextCustodian: 'c' }))).toBeUndefined();
    expect(refusedWith(() => checkRenew({ capability: 't', next: '', nextCustodian: 'c' }))).toBe('INVALID_ARGUMENT');
    expect(refusedWith(() => checkRenew({ capability: 't', next: 'n', nextCustodian: undefined as never }))).toBe('INVALID_ARGUMENT');
  });
});
