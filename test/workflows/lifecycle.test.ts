// The lifecycle table on its own: every phase's admissible events, and the timer each phase runs.
import { describe, expect, it } from 'vitest';

import { LifecycleError, canTake, next, timerOf, type AgentPhase, type LifecycleEvent } from '../../src/workflows/lifecycle';

const PHASES: AgentPhase[] = ['created', 'active', 'idle', 'warm', 'cold', 'resumed', 'released'];

describe('lifecycle', () => {
  it('walks created -> active <-> idle -> warm -> cold -> resumed -> released', () => {
    const path: Array<[LifecycleEvent, AgentPhase]> = [
      ['turn-started', 'active'],
      ['turn-finished', 'idle'],
      ['turn-started', 'active'],
      ['turn-finished', 'idle'],
      ['idle-timeout', 'warm'],
      ['warm-timeout', 'cold'],
      ['resumed', 'resumed'],
      ['turn-started', 'active'],
      ['turn-finished', 'idle'],
      ['suspended-disk', 'cold'],
      ['holder-lost', 'cold'],
      ['prefetched-host', 'warm'],
      ['prefetched-device', 'idle'],
      ['suspended-disk', 'cold'],
      ['prefetched-device', 'idle'],
      ['idle-timeout', 'warm'],
      ['warm-timeout', 'cold'],
      ['resumed', 'resumed'],
      ['suspended-host', 'warm'],
      ['released', 'released'],
    ];
    let phase: AgentPhase = 'created';
    for (const [event, expected] of path) {
      phase = next(phase, event);
      expect(phase).toBe(expected);
    }
  });

  it('refuses what a phase does not admit, and nothing leaves released', () => {
    expect(() => next('cold', 'turn-started')).toThrow(LifecycleError);
    expect(() => next('active', 'idle-timeout')).toThrow(/active cannot take 'idle-timeout'/);
    expect(() => next('warm', 'suspended-host')).toThrow(LifecycleError);
    expect(() => next('idle', 'resumed')).toThrow(LifecycleError);
    // Only a context on disk comes up to host memory by a prefetch; a warm one is there already.
    expect(PHASES.filter((phase) => canTake(phase, 'prefetched-host'))).toEqual(['cold']);
    // A prefetch to the device leaves the agent where a resident one waits, from host or disk alike.
    expect(PHASES.filter((phase) => canTake(phase, 'prefetched-device'))).toEqual(['warm', 'cold']);
    const events: LifecycleEvent[] = [
      'turn-started',
      'turn-finished',
      'idle-timeout',
      'warm-timeout',
      'suspended-host',
      'suspended-disk',
      'resumed',
      'prefetched-device',
      'prefetched-host',
      'holder-lost',
      'released',
    ];
    for (const event of events) expect(canTake('released', event)).toBe(false);
    for (const phase of PHASES.filter((p) => p !== 'released')) expect(canTake(phase, 'released')).toBe(true);
  });

  it('runs the idle timer while resident (a turn keeps its class), the warm timer while warm, none otherwise', () => {
    expect(PHASES.map((phase) => timerOf(phase))).toEqual([
      'idle-timeout',
      'idle-timeout',
      'idle-timeout',
      'warm-timeout',
      undefined,
      'idle-timeout',
      undefined,
    ]);
  });
});
