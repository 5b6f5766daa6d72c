// Where the CLI takes an agent's capability from: a file (--capability-file, only its owner may read it)
// or KVFABRIC_CAPABILITY, never an argument. Real files in a temporary directory; which source wins; what
// `start` takes; and the refusals, each before anything connects and without the token in the message.
// (The same as processes against a dev server: test/security/attacks/cli-capability-argument.test.ts.)
import { chmodSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';

import { parseCommand } from '../../src/cli/parse-command';
import { CliUsageError } from '../../src/cli/usage-error';
import { FabricError } from '../../src/fabric/errors';

const scratch = mkdtempSync(join(tmpdir(), 'kvfabric-capability-source-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

let files = 0;
/** A file holding `text` with `mode`. */
function capabilityFile(text: string, mode = 0o600): string {
  const path = join(scratch, `capability-${files++}`);
  writeFileSync(path, text, { mode });
  chmodSync(path, mode); // the umask does not get a say
  return path;
}

function thrownBy(run: () => unknown): unknown {
  try {
    run();
  } catch (err) {
    return err;
  }
  throw new Error('expected a refusal');
}

describe('the capability of an agent command', () => {
  it('comes from --capability-file (trimmed), else KVFABRIC_CAPABILITY; the file given on the call wins', () => {
    const file = capabilityFile('from-file\n');
    expect(parseCommand(['turn', 'a', '--tokens', '3', '--capability-file', file], {})).toMatchObject({ capability: 'from-file' });
    expect(parseCommand(['resume', 'a'], { KVFABRIC_CAPABILITY: 'from-env' })).toMatchObject({ capability: 'from-env' });
    expect(parseCommand(['resume', 'a', `--capability-file=${file}`], { KVFABRIC_CAPABILITY: 'from-env' })).toMatchObject({
      capability: 'from-file',
    });
  });

  it('for start, only from --capability-file: a KVFABRIC_CAPABILITY exported for another agent is not used', () => {
    const file = capabilityFile('minted-elsewhere');
    expect(parseCommand(['start', 'a', '--tenant', 'acme'], { KVFABRIC_CAPABILITY: 'other-agent' }).start).not.toHaveProperty('capability');
    expect(parseCommand(['start', 'a', '--tenant', 'acme', '--capability-file', file], {}).start).toMatchObject({
      agentId: 'a',
      tenant: 'acme',
      capability: 'minted-elsewhere',
    });
  });

  it('follows a symlink to a file only its owner can read (secrets mounted by Kubernetes are such links)', () => {
    const link = join(scratch, 'mounted-capability');
    symlinkSync(capabilityFile('mounted'), link);
    expect(parseCommand(['pin', 'a', '--capability-file', link], {})).toMatchObject({ capability: 'mounted' });
  });

  it.each([
    [['turn', 'a', '--tokens', '3', '--capability', 'SECRET-TOKEN']],
    [['turn', 'a', '--tokens', '3', '--capability=SECRET-TOKEN']],
    [['start', 'a', '--tenant', 'acme', '--capability', 'SECRET-TOKEN']],
    [['--capability', 'SECRET-TOKEN', 'release', 'a']],
    [['release', 'a', '--capability']],
  ])('refuses the capability as an argument, saying where to put it, without repeating it: %j', (argv) => {
    const err = thrownBy(() => parseCommand(argv, {}));
    expect(err).toBeInstanceOf(CliUsageError);
    expect((err as CliUsageError).command).toBe(argv.find((arg) => ['turn', 'start', 'release'].includes(arg)));
    expect((err as CliUsageError).message).toMatch(
      /^--capability is not taken on the command line, where ps shows it to every user: .*--capability-file PATH, or set KVFABRIC_CAPABILITY$/,
    );
    expect((err as CliUsageError).line()).not.toContain('SECRET-TOKEN');
  });

  it('takes `--capability` after `--` as the positional it is there (and refuses that as an extra argument)', () => {
    expect(() => parseCommand(['status', 'a', '--', '--capability'], {})).toThrow(/takes 1 argument\(s\), got 2/);
  });

  it('refuses a file that others can read or the group can change, naming the setting, the path and the fix', () => {
    const exposures: Array<[number, string]> = [
      [0o644, 'other users can read it'],
      [0o604, 'other users can read it'],
      [0o620, 'its group can change it'],
      [0o666, 'other users can read and change it, and its group can change it'],
      [0o601, 'other users can open it'],
    ];
    for (const [mode, exposure] of exposures) {
      const file = capabilityFile('SECRET-TOKEN', mode);
      const err = thrownBy(() => parseCommand(['resume', 'a', '--capability-file', file], { KVFABRIC_CAPABILITY: 'from-env' }));
      expect(err).toBeInstanceOf(FabricError);
      expect(err).toMatchObject({
        code: 'PERMISSION_DENIED',
        message: `--capability-file: ${file} has mode 0${mode.toString(8)}, so ${exposure}: run chmod 600 ${file}`,
      });
    }
    // A group may read it: a grant made on purpose (a service group, Kubernetes' fsGroup).
    expect(parseCommand(['resume', 'a', '--capability-file', capabilityFile('group-readable', 0o640)], {})).toMatchObject({
      capability: 'group-readable',
    });
  });

  it('refuses a missing file, an empty one, a directory, and the flag on a command that takes no capability', () => {
    expect(thrownBy(() => parseCommand(['resume', 'a', '--capability-file', join(scratch, 'none')], {}))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: `--capability-file: cannot read ${join(scratch, 'none')} (ENOENT)`,
    });
    const empty = capabilityFile(' \n');
    expect(thrownBy(() => parseCommand(['resume', 'a', '--capability-file', empty], {}))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: `--capability-file: ${empty} is empty`,
    });
    expect(thrownBy(() => parseCommand(['resume', 'a', '--capability-file', scratch], {}))).toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: `--capability-file: ${scratch} is not a regular file`,
    });
    const err = thrownBy(() => parseCommand(['status', 'a', '--capability-file', capabilityFile('x')], {}));
    expect(err).toBeInstanceOf(CliUsageError);
    expect((err as Error).message).toMatch(/^--capability-file is for start, turn, suspend/);
  });

  it('checks the call before it opens the file: a malformed call is refused for what is wrong with it', () => {
    const file = capabilityFile('x', 0o644);
    expect(() => parseCommand(['turn', 'a', '--tokens', 'many', '--capability-file', file], {})).toThrow(/--tokens must be a whole number/);
  });

  it('never lets any spelling of --capability through before `--` (fuzz)', () => {
    const word = fc.oneof(fc.constantFrom('turn', 'a', '--tokens', '3', '--json', '--message', 'hi', '--'), fc.string({ maxLength: 6 }));
    const spelling = fc.oneof(
      fc.constant('--capability'),
      fc.string({ maxLength: 8 }).map((value) => `--capability=${value}`),
    );
    fc.assert(
      fc.property(fc.array(word, { maxLength: 6 }), spelling, fc.array(word, { maxLength: 6 }), (before, flag, after) => {
        fc.pre(!before.includes('--'));
        expect(() => parseCommand([...before, flag, ...after], { KVFABRIC_CAPABILITY: 'token' })).toThrow(
          /^--capability is not taken on the command line/,
        );
      }),
      { numRuns: 1000 },
    );
  });
});
