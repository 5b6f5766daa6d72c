// `kvfabric wake`'s arguments: the instant (--at with its zone, --in from now, or --cancel: exactly one),
// the custodian token from a file only its owner reads or KVFABRIC_CUSTODIAN (never an argument), and
// what its usage names. Every refusal comes before anything connects. Real files in a temporary directory.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';

import { commandUsage } from '../../src/cli/command-usage';
import { parseCommand } from '../../src/cli/parse-command';
import { CliUsageError } from '../../src/cli/usage-error';
import { FabricError } from '../../src/fabric/errors';

const scratch = mkdtempSync(join(tmpdir(), 'kvfabric-wake-command-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const custodian = { KVFABRIC_CUSTODIAN: 'custodian-token' };

function fileWith(text: string, mode: number): string {
  const path = join(scratch, `custodian-${mode.toString(8)}`);
  writeFileSync(path, text, { mode });
  chmodSync(path, mode);
  return path;
}

function refusalOf(argv: string[], env: NodeJS.ProcessEnv = { ...custodian, KVFABRIC_CAPABILITY: 'caller-token' }): Error {
  try {
    parseCommand(argv, env);
  } catch (err) {
    return err as Error;
  }
  throw new Error(`expected ${JSON.stringify(argv)} to be refused`);
}

describe('kvfabric wake', () => {
  it('takes --at with its zone, --in from now, or --cancel, and the custodian from KVFABRIC_CUSTODIAN', () => {
    expect(parseCommand(['wake', 'a', '--at', '2030-01-02T09:00:00Z'], custodian)).toMatchObject({
      command: 'wake',
      agentId: 'a',
      wakeAt: Date.UTC(2030, 0, 2, 9),
      custodian: 'custodian-token',
    });
    expect(parseCommand(['wake', 'a', '--at', '2030-01-02T09:00+01:00'], custodian).wakeAt).toBe(Date.UTC(2030, 0, 2, 8));
    const before = Date.now();
    const inTwoHours = parseCommand(['wake', 'a', '--in', '2h', '--request-id', 'plan-1'], custodian);
    expect(inTwoHours.wakeAt).toBeGreaterThanOrEqual(before + 2 * 3_600_000);
    expect(inTwoHours.wakeAt).toBeLessThanOrEqual(Date.now() + 2 * 3_600_000);
    expect(inTwoHours.requestId).toBe('plan-1');
    expect(parseCommand(['wake', 'a', '--cancel'], custodian)).toMatchObject({ wakeAt: null });
    // No capability: the custodian's proof is what the workflow admits a plan with.
    expect(parseCommand(['wake', 'a', '--cancel'], custodian)).not.toHaveProperty('capability');
  });

  it('reads the custodian from --custodian-file (trimmed) before the variable; a file others can read is refused', () => {
    const file = fileWith('from-file\n', 0o600);
    expect(parseCommand(['wake', 'a', '--cancel', '--custodian-file', file], custodian)).toMatchObject({ custodian: 'from-file' });
    const open = fileWith('readable', 0o644);
    const err = refusalOf(['wake', 'a', '--cancel', '--custodian-file', open], {});
    expect(err).toBeInstanceOf(FabricError);
    expect(err.message).toMatch(/--custodian-file/);
    expect(err.message).not.toContain('readable');
  });

  const malformed: Array<[string[], RegExp]> = [
    [['wake', 'a'], /^takes one of --at TIME, --in DURATION or --cancel$/],
    [['wake', 'a', '--in', '1h', '--cancel'], /^takes one of --at TIME, --in DURATION or --cancel$/],
    [['wake', 'a', '--at', '2030-01-02T09:00:00Z', '--in', '1h'], /^takes one of/],
    [['wake', 'a', '--at', '2030-01-02T09:00:00'], /--at must be an ISO 8601 time with its zone/],
    [['wake', 'a', '--at', '2030-01-02'], /--at must be an ISO 8601 time with its zone/],
    [['wake', 'a', '--at', 'tomorrow'], /--at must be an ISO 8601 time with its zone, .*got 'tomorrow'/],
    [['wake', 'a', '--at', '2030-13-45T09:00:00Z'], /--at must be an ISO 8601 time/],
    [['wake', 'a', '--in', 'soon'], /--in must be a duration such as 90s/],
    [['wake', 'a', '--in', '0s'], /--in must be a positive duration/],
    [['wake', '--cancel'], /^needs an agent id$/],
    [['turn', 'a', '--tokens', '3', '--custodian-file', '/nonexistent'], /^--custodian-file is for wake$/],
    [['wake', 'a', '--cancel', '--custodian', 'SECRET'], /^--custodian is not taken on the command line.*--custodian-file PATH/],
    [['wake', 'a', '--cancel', '--custodian=SECRET'], /^--custodian is not taken on the command line/],
  ];
  it.each(malformed)('refuses %j before connecting, naming the command', (argv, message) => {
    const err = refusalOf(argv);
    expect(err).toBeInstanceOf(CliUsageError);
    expect(err.message).toMatch(message);
    expect(err.message).not.toContain('SECRET');
    expect((err as CliUsageError).command).toBe(argv[0]);
  });

  it('asks for the custodian when neither the file nor the variable gives it', () => {
    expect(refusalOf(['wake', 'a', '--cancel'], { KVFABRIC_CAPABILITY: 'caller-token' }).message).toMatch(
      /^plans the owner's wake-up: pass --custodian-file PATH or set KVFABRIC_CUSTODIAN/,
    );
  });

  it('answers any --at text with an instant at or after the epoch or a CliUsageError, nothing else (fuzz)', () => {
    const text = fc.oneof(
      fc.string({ maxLength: 30 }),
      fc.date({ noInvalidDate: true }).map((date) => date.toISOString()),
      fc.date({ noInvalidDate: true }).map((date) => date.toISOString().replace('Z', '+05:30')),
    );
    fc.assert(
      fc.property(text, (at) => {
        try {
          const { wakeAt } = parseCommand(['wake', 'a', '--at', at], custodian);
          expect(Number.isSafeInteger(wakeAt) && (wakeAt as number) >= 0).toBe(true);
          expect(wakeAt).toBe(Date.parse(at));
        } catch (err) {
          expect(err).toBeInstanceOf(CliUsageError);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it("names every flag it takes in its usage, and the custodian's sources", () => {
    const usage = commandUsage('wake');
    for (const flag of ['--at', '--in', '--cancel', '--custodian-file', 'KVFABRIC_CUSTODIAN', '--request-id'])
      expect(usage).toContain(flag);
    expect(commandUsage('start')).toMatch(/custodian token, which only wake needs/);
  });
});
