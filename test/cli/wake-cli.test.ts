// `kvfabric wake` as a user runs it, a process against a dev server and a worker process (the synthetic
// engine): `start` prints the custodian token once beside the capability; `wake` with that custodian (from a
// file only its owner reads, or KVFABRIC_CUSTODIAN) plans the wake-up, which `status` shows, and cancels
// it; an agent suspended to disk and planned a few seconds ahead is on the device by then, brought back by
// its own workflow. Planning with the caller's capability, or another agent's custodian, is refused
// (PERMISSION_DENIED, exit 1, the token not repeated) and plans nothing.
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { AgentStatus } from '../../src/workflows/definitions';
import { WAKE_LEAD_FLOOR_MS } from '../../src/workflows/lead-time';
import { startCliRig, type CliRig } from './cli-rig';

const HOUR = 3_600_000;
let rig: CliRig;
const started: Record<string, { capability: string; custodian: string }> = {};

const cli = (args: string[], env: Record<string, string> = {}) => rig.cli(args, env);

function secretFile(name: string, text: string): string {
  const path = join(rig.scratch, name);
  writeFileSync(path, `${text}\n`, { mode: 0o600 });
  chmodSync(path, 0o600);
  return path;
}

beforeAll(async () => {
  rig = await startCliRig('cli-wake');
  for (const agentId of ['sleeper', 'neighbour']) {
    const run = await cli(['start', agentId, '--tenant', 'acme', '--model', 'tiny', '--json']);
    expect(run, run.stderr).toMatchObject({ code: 0 });
    started[agentId] = JSON.parse(run.stdout) as { capability: string; custodian: string };
  }
}, 180_000);

afterAll(async () => {
  await rig?.stop();
});

describe('kvfabric wake', () => {
  it('start prints a custodian token apart from the capability; wake plans with it, status shows the plan, --cancel drops it', async () => {
    const { capability, custodian } = started.sleeper!;
    expect(custodian).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(custodian).not.toBe(capability);
    const before = Date.now();
    const planned = await cli(['wake', 'sleeper', '--in', '2h', '--custodian-file', secretFile('sleeper.custodian', custodian), '--json']);
    expect(planned, planned.stderr).toMatchObject({ code: 0 });
    const plan = (JSON.parse(planned.stdout) as AgentStatus).wake!;
    expect(plan.at).toBeGreaterThanOrEqual(before + 2 * HOUR);
    expect(plan.at).toBeLessThanOrEqual(Date.now() + 2 * HOUR);
    const status = await cli(['status', 'sleeper']);
    expect(status.stdout).toContain(
      `wake-up at ${new Date(plan.at).toISOString()} (prefetch ${(WAKE_LEAD_FLOOR_MS / 1000).toFixed(1)} s before)`,
    );

    const cancelled = await cli(['wake', 'sleeper', '--cancel', '--json'], { KVFABRIC_CUSTODIAN: custodian });
    expect(cancelled, cancelled.stderr).toMatchObject({ code: 0 });
    expect(JSON.parse(cancelled.stdout)).not.toHaveProperty('wake');
  }, 60_000);

  it("refuses a plan with the caller's capability or another agent's custodian, without repeating it; nothing is planned", async () => {
    for (const token of [started.sleeper!.capability, started.neighbour!.custodian]) {
      const run = await cli(['wake', 'sleeper', '--in', '1h'], { KVFABRIC_CUSTODIAN: token });
      expect(run.code).toBe(1);
      expect(run.stderr).toMatch(/^kvfabric: .*wake is the agent's custodian's to send.*\(PERMISSION_DENIED\)\n$/);
      expect(run.stderr).not.toContain(token);
    }
    expect((await rig.agents.status('sleeper')).wake).toBeUndefined();
  }, 60_000);

  it('brings an agent suspended to disk back to the device by the instant planned a few seconds ahead', async () => {
    const { capability, custodian } = started.sleeper!;
    expect(await cli(['turn', 'sleeper', '--tokens', '24'], { KVFABRIC_CAPABILITY: capability })).toMatchObject({ code: 0 });
    expect(await cli(['suspend', 'sleeper', '--tier', 'disk'], { KVFABRIC_CAPABILITY: capability })).toMatchObject({ code: 0 });
    const at = new Date(Date.now() + WAKE_LEAD_FLOOR_MS + 5_000);
    // The time as a user writes it: to the second, with its zone.
    const iso = `${at.toISOString().slice(0, 19)}Z`;
    const planned = await cli(['wake', 'sleeper', '--at', iso, '--json'], { KVFABRIC_CUSTODIAN: custodian });
    expect(planned, planned.stderr).toMatchObject({ code: 0 });
    expect(JSON.parse(planned.stdout)).toMatchObject({ tier: 'disk', wake: { at: Date.parse(iso) } });
    await sleep(Math.max(0, Date.parse(iso) - Date.now()));
    const woken = await rig.agents.status('sleeper');
    expect(woken).toMatchObject({ tier: 'device', tokens: 24, lastResume: { from: 'disk' } });
    expect(woken.wake).toBeUndefined();
  }, 60_000);
});
