// Attack class: the paths a model turn's KV takes outside the turn itself. A turn answers before its KV is
// in the pages (write-behind), the workflow hands the turns' token ids back (the tail) until it is, and a
// stored context reaches llama.cpp through one memory file the engine reuses. An attacker tries each: a
// tail naming other tokens than the pages hold, a context id freed and made again (by another tenant)
// while a turn's write-behind is on its way, another tenant's state left in the reused memory file, a
// resume from host memory (the engine loads the host pages before they move) with a forged record, and a
// context id freed and made again while that resume's copy of the pages to the device waits its pause.
// The real model, a real pool and the real AgentMemory; contexts stay a few dozen tokens long.
import fs from 'node:fs';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { emptyDigest } from '../../../src/agent-memory/context-digest';
import type { LlamaEngine } from '../../../src/engines/llama/llama-engine';
import type { MemoryFixture } from '../memory-fixture';
import { openModelMemory, type ModelMemoryFixture } from '../model-memory-fixture';

let opened: ModelMemoryFixture;
let stateDir: string;
let engine: LlamaEngine;
let fx: MemoryFixture;

beforeAll(async () => {
  opened = await openModelMemory('attack-model-turn', { contextLength: 256, hotContexts: 1 });
  ({ fx, engine, stateDir } = opened);
});
afterAll(async () => {
  await opened?.close();
});

const turn = (agentId: string, token: string, message: string, before = emptyDigest(), tail: number[] = [], tenant = 'acme') =>
  opened.say(agentId, token, message, { before, tail, tenant, maxTokens: 6 });

/** A context of one turn, suspended to host memory: its token and the suspend's result. */
async function suspendedToHost(agentId: string) {
  const token = fx.token(agentId);
  await fx.allocate(agentId, token);
  const first = await turn(agentId, token, 'My name is Ada and I design bridges.');
  const left = await fx.memory.suspend(fx.call(agentId, 'acme', 'suspend', token), {
    tier: 'host',
    expected: first.digest,
    tail: first.added!,
  });
  return { token, left };
}

describe('model turns', () => {
  it('a tail naming other tokens than the pages hold is INTEGRITY: nothing is evaluated or appended', async () => {
    const token = fx.token('forged-tail');
    await fx.allocate('forged-tail', token);
    const first = await turn('forged-tail', token, 'Name a color.');
    await fx.memory.settled(); // the write-behind put the turn's KV into the pages
    const held = fx.tiers.contextStats('forged-tail').tokens;
    expect(held).toBe(first.added!.length);
    // The workflow's record as an attacker rewrote it: the same length, other ids.
    const forged = first.added!.map((id) => (id + 1) % 1000);
    await expect(turn('forged-tail', token, 'Name a fruit.', first.digest, forged)).rejects.toMatchObject({ code: 'INTEGRITY' });
    await fx.memory.settled();
    expect(fx.tiers.contextStats('forged-tail').tokens).toBe(held);
  });

  it("a turn's write-behind never lands in the context id made again for another tenant", async () => {
    const owner = fx.token('reused-id');
    await fx.allocate('reused-id', owner);
    const pending = turn('reused-id', owner, 'Name an animal.');
    await pending;
    // Before the write-behind has put the turn's KV in, the context is freed and the id made again by
    // someone else (what a racing release and allocate would do).
    await fx.tiers.release('reused-id');
    fx.tiers.create('reused-id', 99);
    await fx.memory.settled();
    expect(fx.tiers.contextStats('reused-id').tokens).toBe(0);
    expect(fx.tiers.attachment('reused-id')).toBeUndefined();
    await fx.tiers.release('reused-id');
  });

  it("another tenant's state in the reused memory file never reaches a load, and no state file is left on disk", async () => {
    const long = fx.token('long-context', 'acme');
    const short = fx.token('short-context', 'globex');
    await fx.allocate('long-context', long, { tenant: 'acme' });
    await fx.allocate('short-context', short, { tenant: 'globex' });
    let digest = emptyDigest();
    let tail: number[] = [];
    for (const message of ['Tell me about bridges.', 'And about tunnels?', 'And about roads?']) {
      const result = await turn('long-context', long, message, digest, tail, 'acme');
      tail = [...tail, ...result.added!].slice(result.digest.tokens - digest.tokens);
      digest = result.digest;
    }
    const shortTurn = await turn('short-context', short, 'Hi.', emptyDigest(), [], 'globex');
    await fx.memory.settled();
    // Loaded from its pages into the one sequence: the long one first (its state now fills the memory
    // file), then the short one, whose state is smaller than what the file holds.
    await engine.release('long-context');
    await engine.release('short-context');
    const stored = (contextId: string) => {
      const tokens = fx.tiers.contextStats(contextId).tokens;
      const note = fx.tiers.attachment(contextId) as unknown as { tokens: number[]; fingerprint: typeof engine.fingerprint };
      return {
        tokens: Uint32Array.from(note.tokens),
        fingerprint: note.fingerprint,
        writeKv: (file: Parameters<typeof fx.tiers.writePlaneMajor>[1], pieces: Parameters<typeof fx.tiers.writePlaneMajor>[3]) =>
          fx.tiers.writePlaneMajor(contextId, file, tokens, pieces),
      };
    };
    expect(await engine.load('long-context', stored('long-context'))).toBe('stored');
    expect(await engine.load('short-context', stored('short-context'))).toBe('stored');
    // The short context's sequence holds its own tokens and KV, byte for byte, and nothing else.
    const inEngine = await engine.save('short-context', 0);
    const held = fx.tiers.contextStats('short-context').tokens;
    expect(held).toBe(shortTurn.added!.length);
    expect(Array.from(inEngine.tokens)).toEqual(Array.from(shortTurn.added!));
    expect(Buffer.from(inEngine.kv).equals(Buffer.from(await fx.tiers.read('short-context', 0, held)))).toBe(true);
    // The memory file has no name in any directory: the state directory holds nothing after the loads.
    expect(fs.readdirSync(stateDir)).toEqual([]);
  });

  it('a resume from host with a record the pages do not match is INTEGRITY before the engine loads or a page moves', async () => {
    const { token, left } = await suspendedToHost('forged-record');
    const forged = { ...left.digest, value: emptyDigest().value };
    await expect(fx.memory.resume(fx.call('forged-record', 'acme', 'resume', token), { expected: forged })).rejects.toMatchObject({
      code: 'INTEGRITY',
    });
    expect(fx.tiers.residency('forged-record')).toBe('host');
    // The true record still resumes.
    await expect(fx.memory.resume(fx.call('forged-record', 'acme', 'resume', token), { expected: left.digest })).resolves.toMatchObject({
      from: 'host',
      tier: 'device',
    });
  });

  it("a resume's paused copy to the device never lands in the context id made again for another tenant", async () => {
    const { token: owner, left } = await suspendedToHost('paused-copy');
    await fx.memory.resume(fx.call('paused-copy', 'acme', 'resume', owner), { expected: left.digest });
    // The copy waits out its pause: meanwhile the context is freed and the id made again by someone else
    // (what a racing release and allocate would do, past the memory's own release, which starts the copy).
    expect(fx.tiers.residency('paused-copy')).toBe('host');
    const rowBytes = (await fx.tiers.read('paused-copy', 0, 1)).byteLength;
    await fx.tiers.release('paused-copy');
    fx.tiers.create('paused-copy', 99);
    const theirs = new Uint8Array(rowBytes * 3).fill(7);
    await fx.tiers.append('paused-copy', theirs);
    await fx.tiers.demote('paused-copy', 'host');
    await fx.memory.settled();
    // Their context stays where they put it, as they wrote it.
    expect(fx.tiers.residency('paused-copy')).toBe('host');
    expect(fx.tiers.contextStats('paused-copy').tokens).toBe(3);
    expect(Buffer.from(await fx.tiers.read('paused-copy', 0, 3)).equals(Buffer.from(theirs))).toBe(true);
    await fx.tiers.release('paused-copy');
  });
});
