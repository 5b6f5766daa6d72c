// Attack class (holds): the shared tier directory in hostile hands. Someone who can write the directory
// swaps another tenant's manifest in, flips a byte of a manifest or a segment, or deletes a file, then
// waits for a worker to adopt the victim's context after its holder died. The adopting worker (its
// activities called as the agent's workflow calls them) must refuse with a typed error before any damaged
// byte reaches a caller, adopt nothing it should not, and adopt the context once the files are whole again.
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { DigestState } from '../../../src/agent-memory/context-digest';
import { emptyDigest } from '../../../src/agent-memory/context-digest';
import { MODELS } from '../../../src/engines/models';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { activitiesOf, as, workflowOf } from './activity-fixture';

let dir: string;
let cold: string;
let pristine: string;
const opened: MemoryFixture[] = [];
const tokens: Record<string, string> = {};
const digests: Record<string, DigestState> = {};
const durable: Record<string, number> = {};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-attack-cold-'));
  cold = join(dir, 'cold');
  const holder = await openMemory(dir);
  opened.push(holder);
  const activities = activitiesOf(holder);
  for (const [agentId, tenant] of [
    ['victim', 'acme'],
    ['intruder', 'globex'],
  ] as const) {
    const token = (tokens[agentId] = holder.token(agentId, tenant));
    const base = { agentId, tenant, capability: token };
    await as(workflowOf(agentId), () =>
      activities.placement.allocate({
        ...base,
        operationId: `${agentId}:0`,
        shape: MODELS.tiny!.shape,
        tokensPerBlock: 16,
        checkpoint: true,
      }),
    );
    const turned = await as(workflowOf(agentId), () =>
      activities.holder.turn({ ...base, operationId: `${agentId}:1`, turn: 0, tokens: 40, before: emptyDigest(), checkpoint: true }),
    );
    digests[agentId] = turned.digest;
    durable[agentId] = turned.durableVersion;
  }
  // The holder dies here: what is left is the shared directory.
  pristine = join(dir, 'pristine');
  cpSync(cold, pristine, { recursive: true });
});
afterAll(async () => {
  for (const fx of opened) await fx.close();
  rmSync(dir, { recursive: true, force: true });
});

const manifest = (agentId: string) => join(cold, 'manifests', `${agentId}.manifest`);
const segments = () => readdirSync(join(cold, 'segments')).map((name) => join(cold, 'segments', name));

function flipByte(file: string, at: (length: number) => number): void {
  const bytes = readFileSync(file);
  const index = at(bytes.length);
  bytes[index] = bytes[index]! ^ 0x40;
  writeFileSync(file, bytes);
}

/** A fresh worker over the shared directory adopts and restores the victim as its workflow would. */
async function adoptVictim(): Promise<{ fx: MemoryFixture; outcome: Promise<unknown> }> {
  const fx = await openMemory(dir);
  opened.push(fx);
  const activities = activitiesOf(fx);
  const base = { agentId: 'victim', tenant: 'acme', capability: tokens.victim! };
  const outcome = as(workflowOf('victim'), async () => {
    await activities.placement.recover({ ...base, operationId: 'victim:2', epoch: 1, minVersion: durable.victim! });
    return activities.holder.resume({ ...base, operationId: 'victim:3', expected: digests.victim! });
  });
  return { fx, outcome };
}

const ATTACKS: Array<{ name: string; damage: () => void; code: string }> = [
  {
    name: "another tenant's manifest copied over the victim's",
    damage: () => cpSync(manifest('intruder'), manifest('victim')),
    code: 'INTEGRITY',
  },
  { name: 'a flipped byte in the manifest', damage: () => flipByte(manifest('victim'), (n) => n - 20), code: 'INTEGRITY' },
  { name: 'the manifest deleted', damage: () => rmSync(manifest('victim')), code: 'INTEGRITY' },
  {
    name: 'a flipped ciphertext byte in every segment',
    damage: () => segments().forEach((file) => flipByte(file, (n) => n - 100)),
    code: 'INTEGRITY',
  },
  { name: 'every segment deleted', damage: () => segments().forEach((file) => rmSync(file)), code: 'INTEGRITY' },
  {
    name: "two segments swapped (the victim's blocks under the intruder's names)",
    damage: () => {
      const [a, b] = segments();
      const bytes = readFileSync(a!);
      writeFileSync(a!, readFileSync(b!));
      writeFileSync(b!, bytes);
    },
    code: 'INTEGRITY',
  },
];

describe('attack: tampered, swapped or missing cold-tier files', () => {
  it.each(ATTACKS)('$name: $code, no damaged byte delivered, nothing of another tenant adopted', async ({ damage, code }) => {
    rmSync(cold, { recursive: true, force: true });
    cpSync(pristine, cold, { recursive: true });
    damage();
    const { fx, outcome } = await adoptVictim();
    await expect(outcome).rejects.toMatchObject({ type: code });
    // Whatever it adopted before the damage showed, it never became the victim's context with other bytes.
    if (fx.memory.holds('victim')) expect(fx.memory.snapshot('victim').tier).not.toBe('device');
    expect(fx.memory.tenantStats('globex').contexts).toBe(0);
  });

  it('adopts the victim byte-exact once the files are whole again', async () => {
    rmSync(cold, { recursive: true, force: true });
    cpSync(pristine, cold, { recursive: true });
    const { outcome } = await adoptVictim();
    await expect(outcome).resolves.toMatchObject({ tokens: 40, tier: 'device', from: 'disk', digest: digests.victim });
  });
});
