// The sealed format of the shared directory's records (src/shared-directory/record-seal.ts): a record
// opens only as the kind and context it was sealed for, under a master key of the ring; any change, a
// key the ring lacks, and anything over the size cap are INTEGRITY and audited. Also the cost a resume
// pays for it, printed: one grant read and one epoch listing with its entry read, each opened once.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { Denial } from '../../src/security/audit-log';
import { EpochStore } from '../../src/shared-directory/epochs';
import { GrantStore } from '../../src/shared-directory/grant-store';
import { MAX_RECORD_BYTES, RecordSeal } from '../../src/shared-directory/record-seal';
import { KeyRing } from '../../src/tiers/cold';
import { posixStore, TEST_KEY_RING, testRecordSeal } from './fixtures/test-records';

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'kvfabric-record-seal-'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

const grant = JSON.stringify({ contextId: 'planner', tenant: 'acme', agentId: 'planner' });

/** A seal whose audit lines are collected. */
function audited(ring: KeyRing = TEST_KEY_RING): { seal: RecordSeal; lines: Denial[] } {
  const lines: Denial[] = [];
  return { seal: new RecordSeal(ring, { denied: async (denial) => void lines.push(denial) }), lines };
}

describe('record seal', () => {
  it('opens a record as the kind and context it was sealed for, and as nothing else', async () => {
    const { seal, lines } = audited();
    const record = seal.seal('grant', 'planner', grant);
    expect(await seal.open('grant', 'planner', record)).toBe(grant);
    await expect(seal.open('grant', 'critic', record)).rejects.toMatchObject({ code: 'INTEGRITY' });
    await expect(seal.open('fence', 'planner', record)).rejects.toMatchObject({ code: 'INTEGRITY' });
    expect(lines).toEqual([
      { agent: '', tenant: '', context: 'critic', action: 'open-grant', reason: 'forged-record' },
      { agent: '', tenant: '', context: 'planner', action: 'open-fence', reason: 'forged-record' },
    ]);
  });

  it('refuses every single changed byte, a truncation, an extension and a plain JSON record', async () => {
    const { seal } = audited();
    const record = seal.seal('grant', 'planner', grant);
    for (let i = 0; i < record.length; i++) {
      const bent = Buffer.from(record);
      bent[i]! ^= 0x01;
      await expect(seal.open('grant', 'planner', bent), `byte ${i}`).rejects.toMatchObject({ code: 'INTEGRITY' });
    }
    await expect(seal.open('grant', 'planner', record.subarray(0, record.length - 1))).rejects.toMatchObject({ code: 'INTEGRITY' });
    await expect(seal.open('grant', 'planner', Buffer.concat([record, Buffer.of(0)]))).rejects.toMatchObject({ code: 'INTEGRITY' });
    await expect(seal.open('grant', 'planner', Buffer.from(grant))).rejects.toMatchObject({ code: 'INTEGRITY' });
  });

  it('opens records of an older master key while the ring holds it; a ring without it, or another key of its id, refuses', async () => {
    const old = { id: 'k-old', key: Buffer.alloc(32, 1) };
    const next = { id: 'k-new', key: Buffer.alloc(32, 2) };
    const record = new RecordSeal(new KeyRing([old], 'k-old')).seal('epoch', 'planner', 'note');
    const rotated = new RecordSeal(new KeyRing([old, next], 'k-new'));
    expect(await rotated.open('epoch', 'planner', record)).toBe('note');
    expect(rotated.seal('epoch', 'planner', 'note').includes(Buffer.from('k-new'))).toBe(true);
    await expect(new RecordSeal(new KeyRing([next], 'k-new')).open('epoch', 'planner', record)).rejects.toMatchObject({
      code: 'INTEGRITY',
      message: expect.stringContaining('master key this worker does not hold'),
    });
    const impostor = new RecordSeal(new KeyRing([{ id: 'k-old', key: Buffer.alloc(32, 9) }], 'k-old'));
    await expect(impostor.open('epoch', 'planner', record)).rejects.toMatchObject({ code: 'INTEGRITY' });
  });

  it('caps a record at MAX_RECORD_BYTES, and checks the kind', () => {
    const seal = testRecordSeal();
    expect(() => seal.seal('grant', 'planner', 'x'.repeat(MAX_RECORD_BYTES))).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    expect(() => seal.seal('Grant/../x', 'planner', grant)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  it("costs a resume's admission well under its 1 ms bound (printed)", async () => {
    const seal = testRecordSeal();
    const rounds = 2000;
    const record = seal.seal('grant', 'planner', grant);
    await seal.open('grant', 'planner', record);
    let start = performance.now();
    for (let i = 0; i < rounds; i++) seal.seal('grant', 'planner', grant);
    const sealUs = ((performance.now() - start) * 1000) / rounds;
    start = performance.now();
    for (let i = 0; i < rounds; i++) await seal.open('grant', 'planner', record);
    const openUs = ((performance.now() - start) * 1000) / rounds;

    // What admission reads (AgentMemory.admit): the grant, and the epoch (a listing and its greatest entry).
    const grants = await GrantStore.open(await posixStore(root), 'grants/', seal);
    await grants.put({ contextId: 'planner', tenant: 'acme', agentId: 'planner' });
    const epochs = await EpochStore.open(await posixStore(root), 'epochs/', seal);
    await epochs.raise('planner', 5);
    const grantFile = join(root, 'grants', readdirSync(join(root, 'grants'))[0]!);
    const timed = async (what: () => Promise<unknown>) => {
      for (let i = 0; i < 50; i++) await what();
      const began = performance.now();
      for (let i = 0; i < 500; i++) await what();
      return ((performance.now() - began) * 1000) / 500;
    };
    const plainReadUs = await timed(() => readFile(grantFile)); // what reading a grant cost before it was sealed
    const grantUs = await timed(() => grants.get('planner'));
    const epochUs = await timed(() => epochs.minimum('planner'));
    const epochFolder = join(root, 'epochs', readdirSync(join(root, 'epochs'))[0]!);
    const listingUs = await timed(() => readdir(epochFolder)); // what reading an epoch cost before
    const us = (value: number) => `${value.toFixed(0)} us`;
    console.log(
      `record seal: seal ${sealUs.toFixed(1)} us, open ${openUs.toFixed(1)} us per record; ` +
        `grant read+open ${us(grantUs)} (a plain readFile of it ${us(plainReadUs)}); ` +
        `epoch listing+entry ${us(epochUs)} (the listing alone ${us(listingUs)})`,
    );
    expect(sealUs + openUs).toBeLessThan(1000);
  });
});
