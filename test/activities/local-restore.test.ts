// The local restore's refusals, on a real memory: it acts only for a context this worker holds in memory,
// and otherwise answers null before it checks a capability or touches a tier, so the workflow calls the
// holder's queue instead. (Its restore itself, in a workflow task, is in test/temporal/local-restore.test.ts.)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, expect, it } from 'vitest';

import { createActivities } from '../../src/activities';
import type { LocalRestoreRequest } from '../../src/activities/types';
import { emptyDigest } from '../../src/agent-memory/context-digest';
import { openMemory, type MemoryFixture } from '../security/memory-fixture';

let fixture: MemoryFixture | undefined;
let dir: string | undefined;
afterEach(async () => {
  await fixture?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  fixture = dir = undefined;
});

it('answers null for another holder, a context it does not hold, and one on disk, touching no tier', async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-local-restore-'));
  fixture = await openMemory(dir);
  const { memory, call, token, tierCalls } = fixture;
  const { local } = createActivities({ memory, holder: 'queue@here', runsWorkflows: true });
  const capability = token('ctx');
  await memory.create(call('ctx', 'acme', 'allocate', capability), false);
  const { digest } = await memory.appendTurn('ctx', 0, { tokens: 21 }, emptyDigest());
  await memory.offload('ctx', 'host');
  const request = (over: Partial<LocalRestoreRequest> = {}): LocalRestoreRequest => ({
    agentId: 'ctx', tenant: 'acme', capability, operationId: `ctx:${tierCalls.length}`, expected: digest, verify: true, holder: 'queue@here', ...over,
  });

  // Tier calls after `mark` other than the reads that find the context and its tier.
  const changesSince = (mark: number) => tierCalls.slice(mark).filter((name) => !['has', 'residency', 'contextStats', 'durableVersion'].includes(name));

  const before = tierCalls.length;
  expect(await local.restoreIfHolder(request({ holder: 'queue@elsewhere' }))).toBeNull();
  expect(await local.restoreIfHolder(request({ agentId: 'not-held' }))).toBeNull();
  // A bad capability is not looked at either: the holder's own restore checks it.
  expect(await local.restoreIfHolder(request({ holder: 'queue@elsewhere', capability: 'forged' }))).toBeNull();
  expect(changesSince(before)).toEqual([]);
  expect(memory.snapshot('ctx').tier).toBe('host');

  await memory.offload('ctx', 'disk');
  const onDisk = tierCalls.length;
  expect(await local.restoreIfHolder(request())).toBeNull();
  expect(changesSince(onDisk)).toEqual([]);
  expect(memory.snapshot('ctx').tier).toBe('disk');
});
