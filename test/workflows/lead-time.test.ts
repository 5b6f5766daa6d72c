// A wake-up's lead time: the context's size over its own last restore's throughput, with the margin, never
// under the floor; learned only from a resume that moved bytes.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { initialState } from '../../src/workflows/agent-state';
import { DEFAULT_AGENT_CONFIG, type AgentInput } from '../../src/workflows/definitions';
import { WAKE_LEAD_FLOOR_MS, WAKE_LEAD_MARGIN, learnResumeSpeed, leadTimeMs } from '../../src/workflows/lead-time';

const INPUT: AgentInput = {
  agentId: 'a',
  tenant: 'acme',
  capability: 'c',
  model: { name: 'tiny', shape: { layers: 2, kvHeads: 2, headDim: 16, dtypeBytes: 2 }, tokensPerBlock: 16 },
  config: DEFAULT_AGENT_CONFIG,
};
const BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 2;

describe('leadTimeMs', () => {
  it('is the margin times the learned restore time at the size now, never under the floor, and grows with the size', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1 << 22 }),
        fc.integer({ min: 1, max: 1 << 30 }),
        fc.integer({ min: 0, max: 60_000 }),
        (tokens, bytes, ms) => {
          const state = { ...initialState(INPUT), tokens, restore: { bytes, ms } };
          const lead = leadTimeMs(INPUT, state);
          const restoreMs = (tokens * BYTES_PER_TOKEN * Math.max(ms, 1)) / bytes;
          expect(lead).toBeGreaterThanOrEqual(WAKE_LEAD_FLOOR_MS);
          expect(lead).toBeGreaterThanOrEqual(WAKE_LEAD_MARGIN * restoreMs - 1e-6);
          expect(lead).toBeLessThanOrEqual(Math.max(WAKE_LEAD_FLOOR_MS, Math.ceil(WAKE_LEAD_MARGIN * restoreMs) + 1));
          expect(leadTimeMs(INPUT, { ...state, tokens: tokens + 1000 })).toBeGreaterThanOrEqual(lead);
        },
      ),
    );
  });

  it('learns from a resume that moved bytes only', () => {
    const state = initialState(INPUT);
    learnResumeSpeed(state, { bytes: 0, transferMs: 0, verifyMs: 1, engineLoadMs: 40, from: 'host' });
    expect(state.restore).toBeUndefined();
    learnResumeSpeed(state, { bytes: 4_000_000, transferMs: 30, verifyMs: 2, engineLoadMs: 8, from: 'disk' });
    expect(state.restore).toEqual({ bytes: 4_000_000, ms: 40 });
    // 3.2 M tokens of the tiny model (819 MB) at 100,000 bytes per ms: 8.2 s of restore, twice that ahead.
    expect(leadTimeMs(INPUT, { ...state, tokens: 3_200_000 })).toBe(Math.ceil((2 * 3_200_000 * BYTES_PER_TOKEN) / 100_000));
  });
});
