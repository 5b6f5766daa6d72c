// The CLI as a user meets it, run as a process: help for the whole CLI and for one command, bad input as
// one line naming the command with exit 2 (before anything connects), and a Temporal that does not answer
// as one line naming the address and namespace it tried, exit 1, within the connect timeout.
import { describe, expect, it } from 'vitest';

import { freePort } from '../../src/dev-server/dev-server';
import { TEST_CODEC_KEYS, keyListText } from '../security/test-keys';
import { runCli } from './run-cli';

const NO_STACK = /\n\s+at /;

describe('kvfabric command line', () => {
  it("prints the overview for --help, and only one command's usage for <command> --help", async () => {
    const [overview, turn, codec, viaHelp] = await Promise.all([
      runCli(['--help']),
      runCli(['turn', '--help']),
      runCli(['codec-server', '-h']),
      runCli(['help', 'keygen']),
    ]);
    expect(overview.code).toBe(0);
    expect(overview.stdout).toMatch(/^Usage: kvfabric <command>/);
    for (const command of ['start <agent>', 'turn <agent>', 'fork <agent> <child>', 'keygen --out DIR', 'codec-server [--port N]'])
      expect(overview.stdout).toContain(command);
    expect(turn).toMatchObject({ code: 0, stderr: '' });
    expect(turn.stdout).toMatch(/^Usage: kvfabric turn <agent> --message TEXT/);
    expect(turn.stdout).toContain('--request-id R');
    expect(turn.stdout).not.toMatch(/fork <agent>|keygen|codec-server/);
    expect(codec.stdout).toMatch(/^Usage: kvfabric codec-server/);
    expect(codec.stdout).not.toContain('--connect-timeout');
    expect(viaHelp.stdout).toMatch(/^Usage: kvfabric keygen --out DIR/);
  });

  it('answers bad input with one line naming the command and its help, exit 2, without connecting', async () => {
    // Nothing listens on port 1: a connection attempt would fail differently and later.
    const env = { KVFABRIC_CAPABILITY: 't' };
    const [missing, malformed, unknown, badPort] = await Promise.all([
      runCli(['turn', 'a', '--address', '127.0.0.1:1'], env),
      runCli(['turn', 'a', '--tokens', 'x', '--address', '127.0.0.1:1'], env),
      runCli(['launch', 'a']),
      runCli(['codec-server', '--port', 'http']),
    ]);
    expect(missing).toMatchObject({
      code: 2,
      stdout: '',
      stderr: 'kvfabric: turn: --message or --tokens is required (see kvfabric turn --help)\n',
    });
    expect(malformed).toMatchObject({
      code: 2,
      stderr: "kvfabric: turn: --tokens must be a whole number from 1 to 2147483647, got 'x' (see kvfabric turn --help)\n",
    });
    expect(unknown).toMatchObject({ code: 2, stderr: "kvfabric: unknown command 'launch' (see kvfabric --help)\n" });
    expect(badPort).toMatchObject({
      code: 2,
      stderr: "kvfabric: codec-server: --port must be a port number from 0 to 65535, got 'http' (see kvfabric codec-server --help)\n",
    });
    for (const run of [missing, malformed, unknown, badPort]) expect(run.stderr).not.toMatch(NO_STACK);
  });

  it('names the address and namespace it could not reach, exit 1, within the connect timeout', async () => {
    const port = await freePort(); // free a moment ago: nothing listens there
    const started = Date.now();
    const run = await runCli(['status', 'a', '--address', `127.0.0.1:${port}`, '--namespace', 'ops', '--connect-timeout', '1s'], {
      KVFABRIC_CODEC_KEYS: keyListText(TEST_CODEC_KEYS),
    });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(
      new RegExp(`^kvfabric: cannot reach Temporal at 127\\.0\\.0\\.1:${port} \\(namespace ops\\): .+ \\(UNAVAILABLE\\)\\n$`),
    );
    // The SDK's default is 10 s; the process start under tsx takes a few seconds on a loaded machine.
    expect(Date.now() - started).toBeLessThan(9000);
  });
});
