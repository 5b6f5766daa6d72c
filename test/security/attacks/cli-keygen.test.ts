// Attacks on `kvfabric keygen` and the directory it writes keys into (issue 25, item 8): a symlink or a
// dangling symlink in place of a key file or of the directory, a directory others can write or another
// user owns, a key file another user owns, a failure in the middle, a process racing the commit. Each is
// refused with a typed error naming the path (or, for a foreign file under --force, answered by a new file
// of ours), and the directory is left exactly as it was: same entries, inodes, modes, owners and bytes,
// no partial set of keys, no temporary file. keygen runs before anything connects, so nothing is audited:
// its refusals are local. Real files; the cases that need root (chown, chattr) run where the tests are root.
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';

import { keygen } from '../../../src/cli/keygen';
import { writeKeyFiles, type FileToWrite } from '../../../src/cli/write-key-files';
import { FabricError } from '../../../src/fabric/errors';
import { runCli } from '../../cli/run-cli';

const FILES = ['signing.keys', 'trusted.keys', 'codec.keys', 'master.keys', 'codec-server.token'];
const ME = process.getuid!();
const ROOT = ME === 0;
const STRANGER = 12345;
const scratch = mkdtempSync(join(tmpdir(), 'kvfabric-keygen-attacks-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Whether this machine lets us make a file immutable (root, a file system with the attribute). */
const CAN_CHATTR = (() => {
  if (!ROOT) return false;
  const probe = join(scratch, 'chattr-probe');
  writeFileSync(probe, '');
  try {
    execFileSync('chattr', ['+i', probe], { stdio: 'ignore' });
    execFileSync('chattr', ['-i', probe], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  } finally {
    rmSync(probe, { force: true });
  }
})();

let dirs = 0;
/** A fresh directory (mode 0700 unless told), empty or holding a complete earlier key set. */
function directory(content: 'empty' | 'keys', mode = 0o700): string {
  const dir = join(scratch, `d${dirs++}`);
  if (content === 'keys') keygen(['--out', dir], () => undefined);
  else mkdirSync(dir);
  chmodSync(dir, mode);
  return dir;
}

/** A file outside the key directory that an attacker wants keygen to write through a link. */
function victim(): string {
  const path = join(scratch, `victim-${dirs++}`);
  writeFileSync(path, 'the victim file\n', { mode: 0o644 });
  return path;
}

/** Everything about a directory keygen could change: itself and each entry, bytes included. */
function snapshot(dir: string): unknown {
  const self = lstatSync(dir);
  return {
    self: { ino: self.ino, mode: self.mode, uid: self.uid },
    entries: readdirSync(dir)
      .sort()
      .map((name) => {
        const path = join(dir, name);
        const stat = lstatSync(path);
        return {
          name,
          ino: stat.ino,
          mode: stat.mode,
          uid: stat.uid,
          nlink: stat.nlink,
          ...(stat.isSymbolicLink() ? { link: readlinkSync(path) } : stat.isFile() ? { bytes: readFileSync(path, 'utf8') } : {}),
        };
      }),
  };
}

/** Runs keygen, which must refuse with `code`; returns the error. */
function refused(argv: string[], code: FabricError['code']): FabricError {
  let thrown: unknown;
  try {
    keygen(argv, () => undefined);
  } catch (err) {
    thrown = err;
  }
  expect(thrown).toBeInstanceOf(FabricError);
  expect(thrown).toMatchObject({ code });
  return thrown as FabricError;
}

/** After a success: every key file ours, regular, 0600, alone (no second link), no temporary left. */
function expectFreshSet(dir: string, before?: Map<string, number>): void {
  for (const name of FILES) {
    const stat = lstatSync(join(dir, name));
    expect(stat.isFile(), name).toBe(true);
    expect(stat.mode & 0o777, name).toBe(0o600);
    expect(stat.uid, name).toBe(ME);
    expect(stat.nlink, name).toBe(1);
    if (before?.has(name)) expect(stat.ino, `${name} is a new file`).not.toBe(before.get(name));
  }
  expect(readdirSync(dir).filter((name) => name.startsWith('.'))).toEqual([]);
}

describe('keygen: symlinks', () => {
  it('refuses a symlink in place of a key file, with or without --force; nothing is written, through it or beside it', () => {
    for (const force of [false, true]) {
      const dir = directory('keys');
      const target = victim();
      rmSync(join(dir, 'codec.keys'));
      symlinkSync(target, join(dir, 'codec.keys'));
      const before = snapshot(dir);
      const err = refused(['--out', dir, ...(force ? ['--force'] : [])], 'INVALID_ARGUMENT');
      expect(err.message).toBe(
        `${join(dir, 'codec.keys')} is a symbolic link: keygen never writes through one nor replaces one; remove it and run keygen again`,
      );
      expect(snapshot(dir)).toEqual(before);
      expect(readFileSync(target, 'utf8')).toBe('the victim file\n');
      expect(statSync(target).mode & 0o777).toBe(0o644);
    }
  });

  it('refuses a dangling symlink as a typed error naming it, before any file is written (it was a raw EEXIST after three)', async () => {
    for (const force of [false, true]) {
      const dir = directory('empty');
      const target = join(scratch, `planted-${dirs++}`);
      symlinkSync(target, join(dir, 'master.keys')); // the fourth file keygen writes
      const before = snapshot(dir);
      const err = refused(['--out', dir, ...(force ? ['--force'] : [])], 'INVALID_ARGUMENT');
      expect(err.message).toMatch(new RegExp(`^${join(dir, 'master.keys')} is a symbolic link`));
      expect(snapshot(dir)).toEqual(before);
      expect(() => lstatSync(target)).toThrow(/ENOENT/);
    }
    // As the operator meets it: one line with the code, exit 1, nothing written.
    const dir = directory('empty');
    symlinkSync(join(scratch, 'nowhere'), join(dir, 'master.keys'));
    const run = await runCli(['keygen', '--out', dir]);
    expect(run).toMatchObject({
      code: 1,
      stdout: '',
      stderr: `kvfabric: ${join(dir, 'master.keys')} is a symbolic link: keygen never writes through one nor replaces one; remove it and run keygen again (INVALID_ARGUMENT)\n`,
    });
    expect(readdirSync(dir)).toEqual(['master.keys']);
  });

  it('refuses --out that is a symlink to a directory, and writes nothing into the directory it points at', () => {
    const real = directory('empty');
    const link = join(scratch, `link-${dirs++}`);
    symlinkSync(real, link);
    const before = snapshot(real);
    const err = refused(['--out', link, '--force'], 'INVALID_ARGUMENT');
    expect(err.message).toBe(`${link} is a symbolic link: keygen writes keys only into a real directory (give --out the directory itself)`);
    expect(snapshot(real)).toEqual(before);
  });
});

describe('keygen: directories others control', () => {
  it.each([0o777, 0o770, 0o1777, 0o702].map((mode) => [mode.toString(8), mode] as const))(
    'refuses a directory with mode 0%s, naming it and the fix, and leaves its mode as it was',
    (_, mode) => {
      const dir = directory('keys', mode);
      const before = snapshot(dir);
      const err = refused(['--out', dir, '--force'], 'PERMISSION_DENIED');
      expect(err.message).toBe(
        `${dir} has mode 0${(mode & 0o777).toString(8)}: others can write it, and so swap a key file or plant a link; run chmod go-w ${dir} (or chmod 700) first, or use another directory`,
      );
      expect(snapshot(dir)).toEqual(before);
      expect(statSync(dir).mode & 0o7777).toBe(mode);
    },
  );

  it('accepts a directory others may only read (0755): the files in it are 0600', () => {
    const dir = directory('empty', 0o755);
    keygen(['--out', dir], () => undefined);
    expectFreshSet(dir);
    expect(statSync(dir).mode & 0o777).toBe(0o755);
  });

  it.skipIf(!ROOT)('refuses a directory another user owns, even 0700: its owner could replace the keys', () => {
    const dir = directory('empty');
    chownSync(dir, STRANGER, STRANGER);
    const before = snapshot(dir);
    const err = refused(['--out', dir], 'PERMISSION_DENIED');
    expect(err.message).toBe(
      `${dir} belongs to uid ${STRANGER}, not to this user (uid ${ME}), who could replace the keys in it: use a directory of your own`,
    );
    expect(snapshot(dir)).toEqual(before);
  });
});

describe('keygen: a key file another user owns', () => {
  it.skipIf(!ROOT)(
    'is refused without --force; with --force replaced by a new file of ours, never written into (its owner keeps only the old keys)',
    () => {
      const dir = directory('keys');
      const codec = join(dir, 'codec.keys');
      chownSync(codec, STRANGER, STRANGER);
      chmodSync(codec, 0o644);
      // The other user's hold on the old file: a second link in a place of theirs (an open descriptor alike).
      const held = join(directory('empty'), 'held');
      linkSync(codec, held);
      const oldKeys = readFileSync(codec, 'utf8');
      const inodes = new Map(FILES.map((name) => [name, lstatSync(join(dir, name)).ino]));

      const before = snapshot(dir);
      expect(refused(['--out', dir], 'INVALID_STATE').message).toMatch(/already exist: pass --force/);
      expect(snapshot(dir)).toEqual(before);

      const printed: string[] = [];
      keygen(['--out', dir, '--force'], (line) => printed.push(line));
      expectFreshSet(dir, inodes);
      expect(readFileSync(codec, 'utf8')).not.toBe(oldKeys);
      expect(readFileSync(held, 'utf8')).toBe(oldKeys); // the new keys never went into the inode they own
      expect(lstatSync(held)).toMatchObject({ uid: STRANGER, nlink: 1 });
      expect(printed).toContain(`replaced ${codec}, which belonged to uid ${STRANGER}: that user may hold the old keys`);
    },
  );
});

describe('keygen: failures part way', () => {
  it.skipIf(!CAN_CHATTR)(
    'a key file that cannot be replaced (immutable), third of five: the two already replaced are put back, same files',
    () => {
      const dir = directory('keys');
      const codec = join(dir, 'codec.keys');
      execFileSync('chattr', ['+i', codec]);
      try {
        const before = snapshot(dir);
        const err = refused(['--out', dir, '--force'], 'PERMISSION_DENIED');
        expect(err.message).toBe(
          `keygen could not rename ${codec} -> ${err.message.match(/-> (\S+) \(EPERM\)/)?.[1]} (EPERM): nothing in ${dir} was changed`,
        );
        expect(snapshot(dir)).toEqual(before);
      } finally {
        execFileSync('chattr', ['-i', codec]);
      }
    },
  );

  it("a file planted at an empty key path between the check and the commit stops the commit; the racer's file stays, ours go", () => {
    for (const force of [false, true]) {
      const dir = directory('empty');
      const planted = join(dir, 'codec.keys');
      let during: unknown;
      let thrown: unknown;
      try {
        writeKeyFiles(dir, keyFiles(), {
          force,
          beforeCommit: () => {
            writeFileSync(planted, "the racer's file\n");
            during = snapshot(dir);
          },
        });
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(FabricError);
      expect(thrown).toMatchObject({
        code: 'INVALID_STATE',
        message: `${planted} appeared while keygen was writing (another process?): nothing in ${dir} was changed`,
      });
      expect(snapshot(dir)).toEqual(withoutTemporaries(during));
      expect(readdirSync(dir)).toEqual(['codec.keys']);
    }
  });

  it('a symlink swapped in for an existing key file before the commit is replaced, not followed (--force)', () => {
    const dir = directory('keys');
    const target = victim();
    const inodes = new Map(FILES.map((name) => [name, lstatSync(join(dir, name)).ino]));
    writeKeyFiles(dir, keyFiles(), {
      force: true,
      beforeCommit: () => {
        unlinkSync(join(dir, 'master.keys'));
        symlinkSync(target, join(dir, 'master.keys'));
      },
    });
    expectFreshSet(dir, inodes);
    expect(readFileSync(target, 'utf8')).toBe('the victim file\n');
  });

  it('any failure before the commit removes the temporaries and every directory this call created', () => {
    const outer = join(scratch, `created-${dirs++}`);
    const inner = join(outer, 'keys');
    expect(() =>
      writeKeyFiles(inner, keyFiles(), {
        force: false,
        beforeCommit: () => {
          expect(readdirSync(inner)).toHaveLength(FILES.length); // the five temporaries, written
          throw new Error('killed');
        },
      }),
    ).toThrow('killed');
    expect(() => lstatSync(outer)).toThrow(/ENOENT/);
  });

  it('property: from any state of the directory, keygen writes a complete fresh set or refuses with a typed error and changes nothing', () => {
    const slot = fc.constantFrom('absent', 'file', 'loose-file', 'symlink', 'dangling', 'directory', ...(ROOT ? ['foreign-file'] : []));
    fc.assert(
      fc.property(
        fc.array(slot, { minLength: FILES.length, maxLength: FILES.length }),
        fc.boolean(),
        fc.constantFrom(0o700, 0o755, 0o770, 0o777),
        (slots, force, mode) => {
          const dir = directory('empty', mode);
          const target = victim();
          slots.forEach((state, i) => plant(join(dir, FILES[i]!), state, target));
          const before = snapshot(dir);
          const inodes = new Map(
            FILES.map((name) => [name, lstatSync(join(dir, name), { throwIfNoEntry: false })?.ino]).filter(
              (entry): entry is [string, number] => entry[1] !== undefined,
            ),
          );
          let thrown: unknown;
          try {
            keygen(['--out', dir, ...(force ? ['--force'] : [])], () => undefined);
          } catch (err) {
            thrown = err;
          }
          const mayWrite =
            (mode & 0o022) === 0 &&
            slots.every(
              (state) => state === 'absent' || ((state === 'file' || state === 'loose-file' || state === 'foreign-file') && force),
            );
          if (mayWrite) {
            expect(thrown).toBeUndefined();
            expectFreshSet(dir, inodes);
          } else {
            expect(thrown).toBeInstanceOf(FabricError);
            expect(snapshot(dir)).toEqual(before);
          }
          expect(readFileSync(target, 'utf8')).toBe('the victim file\n');
        },
      ),
      { numRuns: 150 },
    );
  });
});

function keyFiles(): FileToWrite[] {
  return FILES.map((name) => ({ name, text: `# test key file ${name}\n` }));
}

function withoutTemporaries(taken: unknown): unknown {
  const { self, entries } = taken as { self: unknown; entries: Array<{ name: string }> };
  return { self, entries: entries.filter((entry) => !/^\..*\.(tmp|old)$/.test(entry.name)) };
}

/** Puts `state` at `path`: what an earlier run, an accident or an attacker left there. */
function plant(path: string, state: string, target: string): void {
  switch (state) {
    case 'file':
      writeFileSync(path, 'an earlier key\n', { mode: 0o600 });
      break;
    case 'loose-file':
      writeFileSync(path, 'an earlier key, loose\n', { mode: 0o644 });
      break;
    case 'foreign-file':
      writeFileSync(path, "a stranger's key\n", { mode: 0o600 });
      chownSync(path, STRANGER, STRANGER);
      break;
    case 'symlink':
      symlinkSync(target, path);
      break;
    case 'dangling':
      symlinkSync(`${target}.missing`, path);
      break;
    case 'directory':
      mkdirSync(path);
      break;
    default:
      break;
  }
}
