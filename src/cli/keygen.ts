// `kvfabric keygen --out DIR [--force]`: a fresh set of keys for a deployment, one file each, mode 0600, in
// the formats the worker, the client, the CLI and the codec server already read (`id=base64` lines; the
// token as its text), and a table of which variable or flag takes which file and who may hold it. Never
// overwrites a key file without --force: the old keys' tokens, payloads and cold files would stop opening.
import { closeSync, existsSync, fchmodSync, fsyncSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

import { FabricError } from '../fabric/errors';
import { keyListText } from '../security/key-list';
import { newOperatorKeys, type OperatorKeys } from '../security/operator-keys';
import { CliUsageError } from './usage-error';

export interface KeyFile {
  name: string;
  /** The setting that takes the file's path. */
  setting: string;
  /** Who holds it, and what for. */
  holders: string;
  text: string;
}

/** Comment lines must hold no comma: a key list also splits on commas (key-list.ts). */
export function keyFilesOf(keys: OperatorKeys): KeyFile[] {
  const list = (comment: string, entries: OperatorKeys['codec']) => `# ${comment}\n${keyListText(entries, '\n')}\n`;
  return [
    { name: 'signing.keys', setting: 'KVFABRIC_SIGNING_KEYS_FILE', holders: 'the control plane only (AgentClient, the kvfabric CLI): mints capabilities', text: list('kvfabric capability signing key (Ed25519 private). Control plane only.', keys.signing) },
    { name: 'trusted.keys', setting: 'KVFABRIC_TRUSTED_KEYS_FILE', holders: 'every worker: checks capabilities, cannot mint them', text: list('kvfabric trusted capability keys (Ed25519 public). Every worker.', keys.trusted) },
    { name: 'codec.keys', setting: 'KVFABRIC_CODEC_KEYS_FILE', holders: 'workers, clients, the CLI and the codec server: seal Temporal payloads', text: list('kvfabric payload codec key (AES-256). Everyone who talks to Temporal.', keys.codec) },
    { name: 'master.keys', setting: '--key-file or KVFABRIC_KEY_FILE', holders: 'every worker sharing the tier directory: the cold tier', text: list('kvfabric cold-tier master key (AES-256). Every worker of one tier directory.', keys.master) },
    { name: 'codec-server.token', setting: 'KVFABRIC_CODEC_SERVER_TOKEN_FILE', holders: 'the codec server and whoever may read decoded histories', text: `${keys.codecServerToken}\n` },
  ];
}

/** Writes the files and returns their paths; refuses (INVALID_STATE) when one exists and `force` is off. */
export function writeKeyFiles(directory: string, files: readonly KeyFile[], force: boolean): string[] {
  const paths = files.map((file) => join(directory, file.name));
  const existing = paths.filter((path) => existsSync(path));
  if (existing.length > 0 && !force) {
    throw new FabricError('INVALID_STATE', `${existing.join(', ')} already exist${existing.length === 1 ? 's' : ''}: pass --force to replace them (what the old keys signed or sealed stops opening)`);
  }
  mkdirSync(directory, { recursive: true, mode: 0o700 });
  files.forEach((file, i) => {
    const fd = openSync(paths[i]!, force ? 'w' : 'wx', 0o600);
    try {
      // An existing file keeps its mode through open(): set it before a byte of key goes in.
      fchmodSync(fd, 0o600);
      writeSync(fd, file.text);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  });
  return paths;
}

export function keygen(argv: string[], print: (line: string) => void = console.log): void {
  let values;
  try {
    ({ values } = parseArgs({ args: argv, strict: true, options: { out: { type: 'string' }, force: { type: 'boolean' } } }));
  } catch (err) {
    throw new CliUsageError((err as Error).message, 'keygen');
  }
  if (!values.out) throw new CliUsageError('--out DIR is required', 'keygen');
  const directory = resolve(values.out);
  const files = keyFilesOf(newOperatorKeys());
  const paths = writeKeyFiles(directory, files, values.force ?? false);
  print(`wrote ${files.length} files to ${directory} (mode 0600):`);
  const width = Math.max(...files.map((file) => file.setting.length));
  files.forEach((file, i) => print(`  ${file.setting.padEnd(width)}  ${paths[i]}\n  ${''.padEnd(width)}  ${file.holders}`));
  print('To rotate, add a later set\'s lines to these files (docs/operations.md, keys and rotation).');
}
