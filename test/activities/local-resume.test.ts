// The local resume's refusals, on a real memory: it acts only for a context this worker holds in memory,
// and otherwise answers null before it checks a capability or touches a tier, so the workflow calls the
// holder's queue instead. (Its resume itself, in a workflow task, is in test/temporal/local-resume.test.ts.)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, expect, it } from 'vitest';

import { createActivities } from '../../src/activities';
import type { LocalResumeRequest } from '../../src/activities/types';
import { emptyDigest } from '../../src/agent-memory/context-digest';
import { MODELS } from '../../src/engines/models';
import { openMemory, type MemoryFixture } from '../security/memory-fixture';

let fixture: MemoryFixture | undefined;
let dir: string | undefined;
afterEach(async () => {
  await fixture?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  fixture = dir = undefined;
});

it('answers null for another holder, a context it does not hold, and one on disk, touching no tier', async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-local-resume-'));
  fixture = await openMemory(dir);
  const { memory, call, token, tierCalls } = fixture;
  const { local } = createActivities({ memory, holder: 'queue@here', runsWorkflows: true });
  const capability = token('ctx');
  await memory.allocate(call('ctx', 'acme', 'allocate', capability), { shape: MODELS.tiny!.shape, tokensPerBlock: 16, checkpoint: false });
  const { digest } = await memory.turn(call('ctx', 'acme', 'turn', capability), {
    turn: 0,
    tokens: 21,
    before: emptyDigest(),
    checkpoint: false,
  });
  await memory.suspend(call('ctx', 'acme', 'suspend', capability), { tier: 'host' });
  const request = (over: Partial<LocalResumeRequest> = {}): LocalResumeRequest => ({
    agentId: 'ctx',
    tenant: 'acme',
    capability,
    operationId: `ctx:${tierCalls.length}`,
    expected: digest,
    holder: 'queue@here',
    ...over,
  });

  // Tier calls after `mark` other than the reads that find the context and its tier.
  const changesSince = (mark: number) =>
    tierCalls.slice(mark).filter((name) => !['has', 'residency', 'contextStats', 'durableVersion'].includes(name));

  const before = tierCalls.length;
  expect(await local.resumeIfHolder(request({ holder: 'queue@elsewhere' }))).toBeNull();
  expect(await local.resumeIfHolder(request({ agentId: 'not-held' }))).toBeNull();
  // A bad capability is not looked at either: the holder's own resume checks it.
  expect(await local.resumeIfHolder(request({ holder: 'queue@elsewhere', capability: 'forged' }))).toBeNull();
  expect(changesSince(before)).toEqual([]);
  expect(memory.snapshot('ctx').tier).toBe('host');

  await memory.suspend(call('ctx', 'acme', 'suspend', capability), { tier: 'disk' });
  const onDisk = tierCalls.length;
  expect(await local.resumeIfHolder(request())).toBeNull();
  expect(changesSince(onDisk)).toEqual([]);
  expect(memory.snapshot('ctx').tier).toBe('disk');
});
