// `kvfabric keygen --out DIR [--force]`: a fresh set of keys for a deployment, one file each, mode 0600, in
// the formats the worker, the client, the CLI and the codec server already read (`id=base64` lines; the
// token as its text), and a table of which variable or flag takes which file and who may hold it. Never
// replaces a key file without --force: the old keys' tokens, payloads and cold files would stop opening.
// All five files are written or none (write-key-files.ts: no symlink followed, no directory others can write).
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';

import { keyListText } from '../security/key-list';
import { newOperatorKeys, type OperatorKeys } from '../security/operator-keys';
import { CliUsageError } from './usage-error';
import { writeKeyFiles } from './write-key-files';

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
    {
      name: 'signing.keys',
      setting: 'KVFABRIC_SIGNING_KEYS_FILE',
      holders: 'the control plane only (AgentClient, the kvfabric CLI): mints capabilities',
      text: list('kvfabric capability signing key (Ed25519 private). Control plane only.', keys.signing),
    },
    {
      name: 'trusted.keys',
      setting: 'KVFABRIC_TRUSTED_KEYS_FILE',
      holders: 'every worker: checks capabilities, cannot mint them',
      text: list('kvfabric trusted capability keys (Ed25519 public). Every worker.', keys.trusted),
    },
    {
      name: 'codec.keys',
      setting: 'KVFABRIC_CODEC_KEYS_FILE',
      holders: 'workers, clients, the CLI and the codec server: seal Temporal payloads',
      text: list('kvfabric payload codec key (AES-256). Everyone who talks to Temporal.', keys.codec),
    },
    {
      name: 'master.keys',
      setting: '--key-file or KVFABRIC_KEY_FILE',
      holders: 'every worker sharing the tier directory: the cold tier',
      text: list('kvfabric cold-tier master key (AES-256). Every worker of one tier directory.', keys.master),
    },
    {
      name: 'codec-server.token',
      setting: 'KVFABRIC_CODEC_SERVER_TOKEN_FILE',
      holders: 'the codec server and whoever may read decoded histories',
      text: `${keys.codecServerToken}\n`,
    },
  ];
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
  const { paths, replacedForeign } = writeKeyFiles(directory, files, { force: values.force ?? false });
  print(`wrote ${files.length} files to ${directory} (mode 0600):`);
  const width = Math.max(...files.map((file) => file.setting.length));
  files.forEach((file, i) => print(`  ${file.setting.padEnd(width)}  ${paths[i]}\n  ${''.padEnd(width)}  ${file.holders}`));
  // Their owner could read the old keys: whatever those still open (tokens, payloads, cold files) is theirs to open too.
  for (const { path, uid } of replacedForeign) print(`replaced ${path}, which belonged to uid ${uid}: that user may hold the old keys`);
  print("To rotate, add a later set's lines to these files (docs/operations.md, keys and rotation).");
}
