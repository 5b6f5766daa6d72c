// Attack class (holds): hostile ids. Agent ids, tenants and operation ids name files in the shared
// directory (grants, epochs, manifests) and keys in the worker's maps, so a caller sends path traversal,
// NUL bytes, huge strings and non-strings through every activity, hoping to write outside the directory,
// reach another context's records, or crash the worker. Each call must end in a typed failure, and the
// directory must hold exactly the files it held before (the audit log aside).
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';

import fc from 'fast-check';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { emptyDigest } from '../../../src/agent-memory/context-digest';
import { MODELS } from '../../../src/engines/models';
import { openMemory, type MemoryFixture } from '../memory-fixture';
import { activitiesOf, as, workflowOf, type Activities } from './activity-fixture';

let root: string;
let dir: string;
let fx: MemoryFixture;
let activities: Activities;
let victim: string;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'kvfabric-attack-ids-'));
  dir = join(root, 'tier');
  fx = await openMemory(dir);
  activities = activitiesOf(fx);
  victim = fx.token('victim');
  await as(workflowOf('victim'), () =>
    activities.placement.allocate({
      agentId: 'victim',
      tenant: 'acme',
      capability: victim,
      operationId: 'victim:0',
      shape: MODELS.tiny!.shape,
      tokensPerBlock: 16,
      checkpoint: true,
    }),
  );
});
afterAll(async () => {
  await fx?.close();
  rmSync(root, { recursive: true, force: true });
});

/** Every file under the test's root, the audit log left out (denials are supposed to add lines there). */
function files(): string[] {
  const found: string[] = [];
  const walk = (folder: string) => {
    for (const name of readdirSync(folder)) {
      const path = join(folder, name);
      if (statSync(path).isDirectory()) walk(path);
      else found.push(relative(root, path));
    }
  };
  walk(root);
  return found.filter((path) => !path.includes('audit')).sort();
}

const HOSTILE = [
  '../victim',
  '../../etc/passwd',
  'victim/../victim',
  '/tmp/x',
  '',
  ' ',
  '\u0000victim',
  'victim\u0000',
  'a'.repeat(5000),
  '.',
  '..',
  'kvagent-victim',
  '%2e%2e%2fvictim',
  'victim\n',
  'C:\\victim',
];
const hostileValue = fc.oneof(
  fc.constantFrom(...HOSTILE),
  fc.string({ maxLength: 300 }),
  fc.constantFrom(null, undefined, 42, {}, [], { toString: () => '../victim' }) as fc.Arbitrary<unknown>,
);

it('refuses hostile agent ids, tenants and operation ids in every activity with a typed failure, writing no file', async () => {
  const before = files();
  await fc.assert(
    fc.asyncProperty(
      hostileValue,
      hostileValue,
      hostileValue,
      fc.constantFrom('allocate', 'recover', 'turn', 'resume', 'suspend', 'release', 'fork'),
      async (agentId, tenant, operationId, activity) => {
        const request = { agentId, tenant, capability: victim, operationId } as unknown as {
          agentId: string;
          tenant: string;
          capability: string;
          operationId: string;
        };
        const call = (): Promise<unknown> => {
          switch (activity) {
            case 'allocate':
              return activities.placement.allocate({ ...request, shape: MODELS.tiny!.shape, tokensPerBlock: 16, checkpoint: true });
            case 'recover':
              return activities.placement.recover({ ...request, epoch: 1, minVersion: 0 });
            case 'turn':
              return activities.holder.turn({ ...request, turn: 0, tokens: 4, before: emptyDigest(), checkpoint: true });
            case 'resume':
              return activities.holder.resume({ ...request, expected: emptyDigest() });
            case 'suspend':
              return activities.holder.suspend({ ...request, tier: 'disk' });
            case 'release':
              return activities.holder.release(request);
            default:
              return activities.holder.fork({
                ...request,
                childId: agentId as string,
                childCapability: victim,
                childCustodian: victim,
                checkpoint: true,
              });
          }
        };
        const failure = await as(workflowOf('victim'), call).then(
          () => undefined,
          (err: unknown) => err as { type?: string },
        );
        // The victim's own token names 'victim' in 'acme': any other id or tenant is a mismatch, never a success.
        expect(failure?.type).toMatch(/^(PERMISSION_DENIED|INVALID_ARGUMENT|STALE_HANDLE)$/);
      },
    ),
    { numRuns: 300 },
  );
  expect(files()).toEqual(before);
  expect(fx.memory.snapshot('victim')).toMatchObject({ tokens: 0, tier: 'device' });
});
