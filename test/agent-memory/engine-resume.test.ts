// A model worker's resume from host memory: the engine loads from the host pages, and the resume answers
// once it has; the pages follow to the device write-behind. What must hold: the context ends on the
// device, and the conversation continues exactly as an uninterrupted one (greedy); a record the pages do
// not match is refused first (test/security/attacks/model-turn-paths.test.ts). The real model, pool and
// AgentMemory.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { emptyDigest, type DigestState } from '../../src/agent-memory/context-digest';
import type { MemoryFixture } from '../security/memory-fixture';
import { openModelMemory, type ModelMemoryFixture } from '../security/model-memory-fixture';

let opened: ModelMemoryFixture;
let fx: MemoryFixture;

beforeAll(async () => {
  opened = await openModelMemory('engine-resume', { contextLength: 256, hotContexts: 2 });
  ({ fx } = opened);
});
afterAll(async () => {
  await opened?.close();
});

const MESSAGES = ['My name is Ada and I design bridges.', 'What is my name?'];

const say = (agentId: string, token: string, turn: number, message: string, before: DigestState, tail: number[]) =>
  opened.say(agentId, token, message, { turn, before, tail });

describe('resume from host into the engine', () => {
  it('checks and loads the pages, then copies them: the context is on the device and the next turn answers as if it never left', async () => {
    const straight = fx.token('straight');
    await fx.allocate('straight', straight);
    const s1 = await say('straight', straight, 0, MESSAGES[0]!, emptyDigest(), []);
    const s2 = await say('straight', straight, 1, MESSAGES[1]!, s1.digest, s1.added!);

    const paused = fx.token('paused');
    await fx.allocate('paused', paused);
    const p1 = await say('paused', paused, 0, MESSAGES[0]!, emptyDigest(), []);
    expect(p1.reply).toEqual(s1.reply);
    const left = await fx.memory.suspend(fx.call('paused', 'acme', 'suspend', paused), {
      tier: 'host',
      expected: p1.digest,
      tail: p1.added!,
    });
    expect(fx.tiers.residency('paused')).toBe('host');
    const resumed = await fx.memory.resume(fx.call('paused', 'acme', 'resume', paused), { expected: left.digest });
    expect(resumed).toMatchObject({ from: 'host', tier: 'device', digest: left.digest });
    expect(resumed.bytes).toBe(0); // none on the resume's path
    expect(resumed.engineLoadMs).toBeGreaterThan(0);
    await fx.memory.settled();
    expect(fx.tiers.residency('paused')).toBe('device');
    const p2 = await say('paused', paused, 1, MESSAGES[1]!, left.digest, []);
    expect(p2.reply).toEqual(s2.reply);
    await fx.memory.settled();
  });
});
