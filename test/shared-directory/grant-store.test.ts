// Grants in the shared directory are created once and never replaced: two workers creating one context
// id at once (two tenants, or an agent id reused) cannot leave the second one's grant over the first
// one's context. The loser learns it with PERMISSION_DENIED and the winner's grant stays.
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { GrantStore } from '../../src/shared-directory/grant-store';
import { tempFileName } from '../../src/blob-store/posix/temp-files';
import { Racers } from './fixtures/racers';
import { posixStore, testRecordSeal } from './fixtures/test-records';

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'kvfabric-grants-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('grant store', () => {
  it('creates a grant once: the same grant again is a retry, another one is PERMISSION_DENIED and changes nothing', async () => {
    const dir = join(root, 'basic');
    const grants = await GrantStore.open(await posixStore(dir), '', testRecordSeal());
    const planner = { contextId: 'planner', tenant: 'acme', agentId: 'planner' };
    expect(await grants.put(planner)).toBe(true);
    expect(await grants.put(planner)).toBe(false);
    const files = readdirSync(dir);
    await expect(grants.put({ ...planner, tenant: 'globex' })).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    await expect(grants.put({ ...planner, agentId: 'mallory' })).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    await expect(grants.put({ ...planner, fork: 'f-1' })).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(await grants.get('planner')).toEqual(planner);
    expect(readdirSync(dir)).toEqual(files); // no temp file left either
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, files[0]!)).mode & 0o777).toBe(0o600);
    // Released: the id may be granted anew.
    await grants.delete('planner');
    expect(await grants.put({ ...planner, tenant: 'globex', fork: 'f-2' })).toBe(true);
    expect(await grants.get('planner')).toEqual({ ...planner, tenant: 'globex', fork: 'f-2' });
  });

  it('reads a malformed or swapped grant file as INTEGRITY', async () => {
    const dir = join(root, 'malformed');
    const grants = await GrantStore.open(await posixStore(dir), '', testRecordSeal());
    await grants.put({ contextId: 'critic', tenant: 'acme', agentId: 'critic' });
    const file = join(dir, readdirSync(dir)[0]!);
    writeFileSync(file, JSON.stringify({ contextId: 'planner', tenant: 'acme', agentId: 'critic' })); // another context's
    await expect(grants.get('critic')).rejects.toMatchObject({ code: 'INTEGRITY' });
    writeFileSync(file, JSON.stringify({ contextId: 'critic', tenant: 'acme', agentId: 'critic', fork: 7 }));
    await expect(grants.get('critic')).rejects.toMatchObject({ code: 'INTEGRITY' });
  });

  it('removes the temp files of a writer that died (this host, no such process)', async () => {
    const dir = join(root, 'stale');
    await GrantStore.open(await posixStore(dir), '', testRecordSeal());
    const dead = 2 ** 22 + 12345; // above Linux's default pid_max: no such process
    const stale = tempFileName('abc').replace(`-${process.pid}-`, `-${dead}-`);
    writeFileSync(join(dir, stale), '{');
    await GrantStore.open(await posixStore(dir), '', testRecordSeal());
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe('grant store across processes', () => {
  let racers: Racers;
  beforeAll(async () => {
    racers = await Racers.start(2);
  });
  afterAll(() => racers?.stop());

  it('two processes granting one context id to two tenants at one instant: exactly one wins and its grant stays, in 100 trials', async () => {
    const dir = join(root, 'processes');
    const grants = await GrantStore.open(await posixStore(dir), '', testRecordSeal());
    for (let trial = 0; trial < 100; trial++) {
      const contextId = `ctx-${trial}`;
      const tenants = trial % 2 === 0 ? ['acme', 'globex'] : ['globex', 'acme'];
      const results = await racers.race(tenants.map((tenant) => ({ op: 'grant' as const, dir, contextId, tenant, agentId: contextId })));
      const winners = results.flatMap((result, i) => (result.ok && result.value === true ? [tenants[i]] : []));
      expect(winners).toHaveLength(1);
      expect(results.filter((result) => !result.ok).map((result) => !result.ok && result.code)).toEqual(['PERMISSION_DENIED']);
      expect(await grants.get(contextId)).toEqual({ contextId, tenant: winners[0], agentId: contextId });
    }
  });
});
