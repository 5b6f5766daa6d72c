// A wake-up's lead time: the context's size now at the agent's own measured speeds (moving its pages from
// where they are, then checking and loading the whole context), with the margin, never under the floor;
// each speed learned only from a resume that measured it.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { initialState } from '../../src/workflows/agent-state';
import { DEFAULT_AGENT_CONFIG, type AgentInput, type AgentState, type Throughput } from '../../src/workflows/definitions';
import { WAKE_LEAD_FLOOR_MS, WAKE_LEAD_MARGIN, learnResumeSpeed, leadTimeMs } from '../../src/workflows/lead-time';

const INPUT: AgentInput = {
  agentId: 'a',
  tenant: 'acme',
  capability: 'c',
  model: { name: 'tiny', shape: { layers: 2, kvHeads: 2, headDim: 16, dtypeBytes: 2 }, tokensPerBlock: 16 },
  config: DEFAULT_AGENT_CONFIG,
};
const BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 2;
const MIB = 2 ** 20;

const speed = fc.record({ bytes: fc.integer({ min: 1, max: 1 << 30 }), ms: fc.integer({ min: 0, max: 60_000 }) });
const msFor = (bytes: number, s: Throughput) => (bytes * Math.max(s.ms, 1)) / s.bytes;

describe('leadTimeMs', () => {
  it('is the margin times moving the pages from where they are plus loading the whole context, never under the floor, growing with the size', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1 << 22 }),
        fc.constantFrom<AgentState['tier']>('device', 'host', 'disk'),
        speed,
        speed,
        fc.option(speed, { nil: undefined }),
        (tokens, tier, host, disk, load) => {
          const state = { ...initialState(INPUT), tokens, tier, restore: { host, disk, ...(load ? { load } : {}) } };
          const lead = leadTimeMs(INPUT, state);
          const bytes = tokens * BYTES_PER_TOKEN;
          const moveMs = tier === 'host' ? msFor(bytes, host) : tier === 'disk' ? msFor(bytes, disk) : 0;
          const restoreMs = moveMs + (load ? msFor(bytes, load) : 0);
          expect(lead).toBeGreaterThanOrEqual(WAKE_LEAD_FLOOR_MS);
          expect(lead).toBeGreaterThanOrEqual(WAKE_LEAD_MARGIN * restoreMs - 1e-6);
          expect(lead).toBeLessThanOrEqual(Math.max(WAKE_LEAD_FLOOR_MS, Math.ceil(WAKE_LEAD_MARGIN * restoreMs) + 1));
          expect(leadTimeMs(INPUT, { ...state, tokens: tokens + 1000 })).toBeGreaterThanOrEqual(lead);
        },
      ),
    );
  });

  it('assumes 100 MB/s for a move not measured yet', () => {
    // 3.2 M tokens of the tiny model (819 MB) on disk, nothing learned: 8.2 s of move, twice that ahead.
    const state = { ...initialState(INPUT), tokens: 3_200_000, tier: 'disk' as const };
    expect(leadTimeMs(INPUT, state)).toBe(Math.ceil((2 * 3_200_000 * BYTES_PER_TOKEN) / 100_000));
  });
});

describe('learnResumeSpeed', () => {
  it('learns a move from where it came, and a check and load of the whole context, each only when measured', () => {
    const state = initialState(INPUT);
    learnResumeSpeed(state, { bytes: 0, transferMs: 0, verifyMs: 0, engineLoadMs: 0, from: 'device' }, 4_000_000);
    expect(state.restore).toBeUndefined();
    learnResumeSpeed(state, { bytes: 4_000_000, transferMs: 30, verifyMs: 2, engineLoadMs: 8, from: 'disk' }, 4_000_000);
    expect(state.restore).toEqual({ disk: { bytes: 4_000_000, ms: 30 }, load: { bytes: 4_000_000, ms: 10 } });
    // A resume from host memory changes the host speed only; one that loaded nothing keeps the load speed.
    learnResumeSpeed(state, { bytes: 8_000_000, transferMs: 2, verifyMs: 0, engineLoadMs: 0, from: 'host' }, 8_000_000);
    expect(state.restore).toEqual({
      disk: { bytes: 4_000_000, ms: 30 },
      host: { bytes: 8_000_000, ms: 2 },
      load: { bytes: 4_000_000, ms: 10 },
    });
  });

  it('does not stretch a small move over the whole context: the wake-up bench case of 2026-12-07', () => {
    // The real model at 2k tokens (44.8 MiB): a resume from disk that moved 0.4 MiB in 9 ms and loaded the
    // whole context into the engine in 60 ms. One speed for both (0.4 MiB over 69 ms) made a lead of 17.8 s.
    const contextBytes = 44.8 * MIB;
    const tokens = Math.round(contextBytes / BYTES_PER_TOKEN);
    const state = { ...initialState(INPUT), tokens, tier: 'disk' as const };
    learnResumeSpeed(state, { bytes: 0.4 * MIB, transferMs: 9, verifyMs: 0, engineLoadMs: 60, from: 'disk' }, tokens * BYTES_PER_TOKEN);
    const lead = leadTimeMs(INPUT, state);
    expect(lead).toBeLessThan(3_000);
    // Still the margin over moving all of it at the speed measured, then loading it.
    expect(lead).toBeGreaterThanOrEqual(2 * ((44.8 / 0.4) * 9 + 60) - 1);
  });
});
