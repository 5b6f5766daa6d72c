// Attack: another tenant's shared prefix through the cold tier. Workers find a prefix there by its keys
// (cold-prefixes.ts): a name salted per tenant, so a tenant's lookups name only its own prefixes. An
// attacker who can write the tier (a shared mount, a bucket) but holds no master key plants an object at
// a name a victim's agent will look up: bytes of its own, or another tenant's prefix (the same prompt)
// copied there. A worker that holds the keys but is wrong (or compromised) writes another tenant's, or
// another prompt's, pages under the name. Each must be refused, INTEGRITY or PERMISSION_DENIED, before a
// page is lent: the adopting worker holds no context and no block afterwards.
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

import type { ErrorCode } from '../../../src/fabric/errors';
import { coldPrefixIdOf } from '../../../src/prefix-sharing/prefix-names';
import { manifestFileName } from '../../../src/tiers/cold/context-names';
import { tokenBytes } from '../../fabric/implementations';
import { keysOf, noteOf, openColdWorkers, publishHolder, TPB, type ColdWorker } from '../../prefix-sharing/cold-workers-fixture';
import { expectCode } from '../../tiers/cold/helpers';

/** The same system prompt, sent by tenants 1 ('acme', the victim) and 2 ('rival'). */
const PROMPT = Uint32Array.from({ length: 4 * TPB }, (_, i) => 40 + i);

let opened: Awaited<ReturnType<typeof openColdWorkers>> | undefined;
afterEach(async () => {
  await opened?.close();
  opened = undefined;
});

async function twoWorkers(): Promise<{ victimWorker: ColdWorker; other: ColdWorker; manifests: string }> {
  opened = await openColdWorkers(2);
  const [victimWorker, other] = opened.workers as [ColdWorker, ColdWorker];
  return { victimWorker, other, manifests: join(opened.dir, 'cold', 'manifests') };
}

/** Tenant `tenant`'s agent on `worker` looks the prompt up in the cold tier: refused with `code`, and nothing is kept. */
async function expectRefused(worker: ColdWorker, tenant: number, tenantName: string, code: ErrorCode): Promise<void> {
  await expectCode(worker.prefixes.adopt(tenant, keysOf(PROMPT, tenantName), PROMPT, 0), code);
  expect(worker.tiers.contextIds()).toEqual([]);
  expect(worker.tiers.stats()).toMatchObject({ usedBlocks: 0, contexts: 0 });
  expect(worker.tiers.stats().host.usedBlocks).toBe(0);
}

/** A worker holding the keys writes pages of `tenant` noted as `noted` under the name of tenant 1's ('acme') prefix of PROMPT. */
async function writeSealed(writer: ColdWorker, tenant: number, noted: Uint32Array): Promise<void> {
  const name = coldPrefixIdOf(keysOf(PROMPT, 'acme').at(-1)!);
  writer.tiers.create(name, tenant);
  await writer.tiers.append(name, tokenBytes(PROMPT.length, tenant), noteOf(noted));
  await writer.tiers.spill(name);
  await writer.tiers.dropLocalCopy(name);
}

describe('shared prefixes in the cold tier (attack)', () => {
  it("an object of the attacker's own at a name the victim looks up: INTEGRITY", async () => {
    const { other, manifests } = await twoWorkers();
    const name = coldPrefixIdOf(keysOf(PROMPT, 'acme').at(-1)!);
    writeFileSync(join(manifests, manifestFileName(name)), Buffer.alloc(600, 0x5a));
    await expectRefused(other, 1, 'acme', 'INTEGRITY');
  });

  it("another tenant's prefix of the same prompt copied to the victim's name: INTEGRITY (a manifest is bound to its name)", async () => {
    const { victimWorker, other, manifests } = await twoWorkers();
    await publishHolder(victimWorker, PROMPT, tokenBytes(PROMPT.length, 1), 2, 'rival');
    const rivalName = coldPrefixIdOf(keysOf(PROMPT, 'rival').at(-1)!);
    const victimName = coldPrefixIdOf(keysOf(PROMPT, 'acme').at(-1)!);
    copyFileSync(join(manifests, manifestFileName(rivalName)), join(manifests, manifestFileName(victimName)));
    await expectRefused(other, 1, 'acme', 'INTEGRITY');
  });

  it("a sealed copy of another tenant's pages under the victim's name (a wrong worker): PERMISSION_DENIED", async () => {
    const { victimWorker, other } = await twoWorkers();
    await writeSealed(victimWorker, 2, PROMPT); // tenant 2's pages, named as tenant 1's prefix
    await expectRefused(other, 1, 'acme', 'PERMISSION_DENIED');
  });

  it("a sealed copy of the tenant's own pages of another prompt under the name: INTEGRITY", async () => {
    const { victimWorker, other } = await twoWorkers();
    await writeSealed(
      victimWorker,
      1,
      PROMPT.map((token) => token + 1),
    );
    await expectRefused(other, 1, 'acme', 'INTEGRITY');
  });

  it('a segment of the copy changed on disk: INTEGRITY when its pages are read, and no page is lent', async () => {
    const { victimWorker, other } = await twoWorkers();
    await publishHolder(victimWorker, PROMPT, tokenBytes(PROMPT.length, 4));
    const [segment] = await victimWorker.cold.listSegments();
    const file = join(opened!.dir, 'cold', 'segments', `${segment}.seg`);
    const bytes = readFileSync(file);
    bytes[bytes.length - 40]! ^= 0xff;
    writeFileSync(file, bytes);
    await expectRefused(other, 1, 'acme', 'INTEGRITY');
  });
});
