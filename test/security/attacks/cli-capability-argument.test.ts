// Attack on the CLI's capability (issue 25, item 10): a capability passed as an argument is in every
// user's `ps`. The CLI refuses `--capability VALUE` outright (exit 2, saying where it goes instead, without
// repeating it) and takes the capability from a file only its owner can read (--capability-file) or from
// KVFABRIC_CAPABILITY. Run as processes, as a user runs them, against a dev server and a worker: the file
// and the variable really act on the agent; each refusal happens before anything connects and leaves the
// agent as it was; a file holding another agent's capability reaches the worker, which refuses and audits
// it without the token.
import { chmodSync, existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { startCliRig, type CliRig } from '../../cli/cli-rig';

let rig: CliRig;
const capabilities: Record<string, string> = {};

/** The CLI as a process with the client's key files; `env` adds to them. */
const cli = (args: string[], env: Record<string, string> = {}) => rig.cli(args, env);

let files = 0;
function capabilityFile(text: string, mode: number): string {
  const path = join(rig.scratch, `capability-${files++}`);
  writeFileSync(path, `${text}\n`, { mode });
  chmodSync(path, mode);
  return path;
}

const tokensOf = async (agentId: string) => (await rig.agents.status(agentId)).tokens;
const auditLines = () => {
  const dir = join(rig.tierDir, 'audit');
  return existsSync(dir) ? readdirSync(dir).flatMap((name) => readFileSync(join(dir, name), 'utf8').split('\n').filter(Boolean)) : [];
};

beforeAll(async () => {
  rig = await startCliRig('cli-capability');
  const started = await Promise.all(
    ['planner', 'other'].map((agentId) => cli(['start', agentId, '--tenant', 'acme', '--model', 'tiny', '--json'])),
  );
  for (const run of started) {
    expect(run, run.stderr).toMatchObject({ code: 0 });
    const { agentId, capability } = JSON.parse(run.stdout) as { agentId: string; capability: string };
    capabilities[agentId] = capability;
  }
}, 180_000);

afterAll(async () => {
  await rig?.stop();
});

describe('the CLI and an agent capability', () => {
  it('acts with the capability from --capability-file (mode 0600) and from KVFABRIC_CAPABILITY', async () => {
    const fromFile = await cli([
      'turn',
      'planner',
      '--tokens',
      '20',
      '--capability-file',
      capabilityFile(capabilities.planner!, 0o600),
      '--json',
    ]);
    expect(fromFile, fromFile.stderr).toMatchObject({ code: 0 });
    expect(JSON.parse(fromFile.stdout)).toMatchObject({ tokens: 20, turns: 1 });
    expect(await rig.agents.status('planner')).toMatchObject({ agentId: 'planner', tokens: 20, turns: 1 });
    const fromEnv = await cli(['turn', 'planner', '--tokens', '10', '--json'], { KVFABRIC_CAPABILITY: capabilities.planner! });
    expect(fromEnv, fromEnv.stderr).toMatchObject({ code: 0 });
    expect(JSON.parse(fromEnv.stdout)).toMatchObject({ tokens: 30, turns: 2 });
  }, 60_000);

  it('refuses --capability VALUE before connecting, exit 2, without repeating the token; the agent is as it was', async () => {
    const before = await rig.agents.status('planner');
    const token = capabilities.planner!;
    const runs = await Promise.all([
      cli(['turn', 'planner', '--tokens', '5', '--capability', token]),
      cli(['release', 'planner', `--capability=${token}`]),
    ]);
    for (const [run, command] of [
      [runs[0]!, 'turn'],
      [runs[1]!, 'release'],
    ] as const) {
      expect(run).toMatchObject({
        code: 2,
        stdout: '',
        stderr: `kvfabric: ${command}: --capability is not taken on the command line, where ps shows it to every user: put the capability in a file only you can read (chmod 600) and pass --capability-file PATH, or set KVFABRIC_CAPABILITY (see kvfabric ${command} --help)\n`,
      });
    }
    expect(await rig.agents.status('planner')).toMatchObject({ tokens: before.tokens, turns: before.turns, phase: before.phase });
  }, 60_000);

  it('refuses a capability file others can read, exit 1 PERMISSION_DENIED, naming the file and the fix; the agent is as it was', async () => {
    const before = await tokensOf('planner');
    const loose = capabilityFile(capabilities.planner!, 0o644);
    const run = await cli(['turn', 'planner', '--tokens', '5', '--capability-file', loose]);
    expect(run).toMatchObject({
      code: 1,
      stdout: '',
      stderr: `kvfabric: --capability-file: ${loose} has mode 0644, so other users can read it: run chmod 600 ${loose} (PERMISSION_DENIED)\n`,
    });
    expect(await tokensOf('planner')).toBe(before);
  }, 60_000);

  it("a file holding another agent's capability reaches the worker, which refuses it and audits it without the token; neither agent changes", async () => {
    const [planner, other] = [await tokensOf('planner'), await tokensOf('other')];
    const audited = auditLines().length;
    const run = await cli(['turn', 'planner', '--tokens', '5', '--capability-file', capabilityFile(capabilities.other!, 0o600)]);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^kvfabric: .*\(PERMISSION_DENIED\)\n$/);
    expect([await tokensOf('planner'), await tokensOf('other')]).toEqual([planner, other]);
    const lines = auditLines();
    expect(lines.length).toBeGreaterThan(audited);
    expect(JSON.parse(lines.at(-1)!)).toMatchObject({ tenant: 'acme', context: 'planner', action: 'turn', reason: 'wrong-context' });
    for (const line of lines) expect(line).not.toContain(capabilities.other!.split('.')[2]!);
  }, 60_000);
});
