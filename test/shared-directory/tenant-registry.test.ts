// Tenant ids from the registry in the shared directory: stable, unique across processes, collisions probed.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { describe, expect, it } from 'vitest';

import { TenantRegistry, preferredTenantId } from '../../src/shared-directory/tenant-registry';
import { FabricError } from '../../src/fabric/errors';
import { posixStore, testRecordSeal } from './fixtures/test-records';

describe('tenant ids', () => {
  /** Two names whose first-choice ids collide (32-bit hashes: found among ~100k names). */
  function collidingNames(): [string, string] {
    const seen = new Map<number, string>();
    for (let i = 0; ; i++) {
      const name = `tenant-${i}`;
      const other = seen.get(preferredTenantId(name));
      if (other !== undefined) return [other, name];
      seen.set(preferredTenantId(name), name);
    }
  }

  it('gives every tenant its own id, colliding hashes included, the same in every process sharing the directory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvfabric-tenants-'));
    const [first, second] = collidingNames();
    expect(preferredTenantId(first)).toBe(preferredTenantId(second));
    // Two registries (two workers) on one directory, asking at once.
    const [a, b] = [
      await TenantRegistry.open(await posixStore(dir), '', testRecordSeal()),
      await TenantRegistry.open(await posixStore(dir), '', testRecordSeal()),
    ];
    const [idA1, idB2, idA2, idB1] = await Promise.all([a.idOf(first), b.idOf(second), a.idOf(second), b.idOf(first)]);
    expect(idA1).toBe(idB1);
    expect(idA2).toBe(idB2);
    expect(idA1).not.toBe(idA2);
    expect([idA1, idA2]).toContain(preferredTenantId(first)); // whoever came first kept the hash
    expect(await (await TenantRegistry.open(await posixStore(dir), '', testRecordSeal())).idOf('acme')).toBe(preferredTenantId('acme'));
    await expect(a.idOf('')).rejects.toBeInstanceOf(FabricError);
    await expect(a.idOf('../etc')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    rmSync(dir, { recursive: true, force: true });
  });
});
