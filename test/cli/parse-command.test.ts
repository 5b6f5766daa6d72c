// The CLI's malformed input: every case fails before connecting, with a typed error naming the argument.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';

import { parseCommand } from '../../src/cli/parse-command';
import { CliUsageError } from '../../src/cli/usage-error';

const env = { KVFABRIC_CAPABILITY: 'token' };

describe('kvfabric CLI arguments', () => {
  it('accepts well-formed calls', () => {
    expect(parseCommand(['turn', 'agent-1', '--tokens', '128'], env)).toMatchObject({
      command: 'turn',
      agentId: 'agent-1',
      tokens: 128,
      capability: 'token',
      taskQueue: 'kvfabric',
    });
    expect(
      parseCommand(['turn', 'agent-1', '--message', 'Hello', '--max-tokens', '16', '--seed', '7', '--temperature', '0.7'], env),
    ).toMatchObject({
      message: 'Hello',
      generation: { maxTokens: 16, seed: 7, temperature: 0.7 },
    });
    expect(parseCommand(['start', 'a', '--tenant', 'acme', '--idle-to-warm', '90s', '--model', '32x8x128x2'], {})).toMatchObject({
      start: { agentId: 'a', tenant: 'acme', model: '32x8x128x2', config: { timers: { idleToWarmMs: 90_000 } } },
    });
    expect(parseCommand(['turn', 'a', '--tokens', '3', '--request-id', 'job-7'], env)).toMatchObject({ requestId: 'job-7' });
    expect(parseCommand(['fork', 'a', 'a-child'], env)).toMatchObject({ agentId: 'a', childId: 'a-child' });
    expect(parseCommand(['list', '--tier', 'disk', '--all'], {})).toMatchObject({ list: { tier: 'disk', includeClosed: true } });
    expect(parseCommand([], {})).toMatchObject({ command: 'help' });
  });

  const malformed: Array<[string[], RegExp]> = [
    [['launch', 'a'], /unknown command 'launch'/],
    [['turn', 'a', '--tokens', 'many'], /--tokens must be a whole number from 1 to 2147483647, got 'many'/],
    [['turn', 'a', '--tokens=-3'], /--tokens must be a whole number/],
    [['turn', 'a', '--tokens', '1e3'], /--tokens must be a whole number/],
    [['turn', 'a', '--tokens', '99999999999'], /--tokens must be a whole number/],
    [['turn', 'a'], /^--message or --tokens is required$/],
    [['turn', 'a', '--message', 'hi', '--tokens', '3'], /--message and --tokens exclude each other/],
    [['turn', 'a', '--message', 'hi', '--max-tokens', '0'], /--max-tokens must be a whole number from 1/],
    [['turn', 'a', '--message', 'hi', '--temperature', '3'], /--temperature must be a number from 0 to 2/],
    [['turn', 'a', '--message', 'hi', '--seed=-1'], /--seed must be a whole number/],
    [['turn', '--tokens', '5'], /^needs an agent id$/],
    [['turn', 'a', 'b', '--tokens', '5'], /^takes 1 argument\(s\), got 2/],
    [['turn', '../etc/passwd', '--tokens', '5'], /agent id '..\/etc\/passwd' is not valid/],
    [['fork', 'a'], /needs an agent id and a child id/],
    [['suspend', 'a', '--tier', 'gpu'], /--tier must be host or disk, got 'gpu'/],
    [['start', 'a'], /--tenant is required/],
    [['start', 'a', '--tenant', 't', '--durability', 'sometimes'], /--durability must be every-turn or on-offload/],
    [['start', 'a', '--tenant', 't', '--idle-to-warm', 'soon'], /--idle-to-warm must be a duration such as 90s/],
    [['start', 'a', '--tenant', 't', '--warm-to-cold=-5s'], /--warm-to-cold must be a positive duration/],
    [['start', 'a', '--tenant', 't', '--model', 'gpt-9'], /unknown model 'gpt-9'/],
    [['list', '--phase', 'sleeping'], /--phase must be one of created, active/],
    [['status', 'a', '--colour'], /Unknown option '--colour'/],
    [['turn', 'a', '--tokens'], /--tokens/],
    [['fork', 'a', 'b', '--request-id', 'r'], /--request-id is for turn, suspend/],
    [['turn', 'a', '--tokens', '3', '--request-id', ''], /--request-id must have 1 to 200 characters/],
  ];
  it.each(malformed)('refuses %j', (argv, message) => {
    let thrown: unknown;
    try {
      parseCommand(argv, env);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(CliUsageError);
    expect((thrown as Error).message).toMatch(message);
    // One line, naming the command the call was for (an unknown one has none to name).
    expect((thrown as CliUsageError).command).toBe(argv[0] === 'launch' ? undefined : argv[0]);
    expect((thrown as CliUsageError).line()).not.toContain('\n');
  });

  it('answers any argument list with a call or a CliUsageError, nothing else (fuzz)', () => {
    const word = fc.oneof(
      fc.constantFrom('start', 'turn', 'suspend', 'resume', 'fork', 'pin', 'unpin', 'release', 'renew', 'status', 'list', 'setup', 'help'),
      fc.constantFrom(
        '--tokens',
        '--message',
        '--max-tokens',
        '--seed',
        '--temperature',
        '--tier',
        '--tenant',
        '--model',
        '--capability',
        '--idle-to-warm',
        '--warm-to-cold',
        '--durability',
        '--phase',
        '--all',
        '--json',
        '--address',
        '--tls',
        '-x',
        '--',
        '--tokens=5',
        '--tier=disk',
      ),
      fc.string({ maxLength: 12 }),
      fc.integer().map(String),
    );
    fc.assert(
      fc.property(fc.array(word, { maxLength: 8 }), (argv) => {
        try {
          const call = parseCommand(argv, env);
          expect(typeof call.command).toBe('string');
        } catch (err) {
          expect(err).toBeInstanceOf(CliUsageError);
          expect((err as CliUsageError).line()).toMatch(/^kvfabric: [\s\S]*\(see kvfabric (\S+ )?--help\)$/);
        }
      }),
      { numRuns: 3000 },
    );
  });

  it('asks for the capability of commands that act on an agent', () => {
    expect(() => parseCommand(['resume', 'a'], {})).toThrow(/^acts on the agent: pass --capability-file PATH or set KVFABRIC_CAPABILITY$/);
  });

  it('answers help for one command, and refuses help for one that does not exist', () => {
    expect(parseCommand(['turn', '--help'], {})).toMatchObject({ command: 'help', topic: 'turn' });
    expect(parseCommand(['turn', 'a', '-h'], {})).toMatchObject({ command: 'help', topic: 'turn' });
    expect(parseCommand(['help', 'keygen'], {})).toMatchObject({ command: 'help', topic: 'keygen' });
    expect(parseCommand(['--help'], {})).toEqual(expect.not.objectContaining({ topic: expect.anything() }));
    expect(() => parseCommand(['help', 'launch'], {})).toThrow(/unknown command 'launch'/);
    expect(() => parseCommand(['--json', 'keygen'], {})).toThrow(/put keygen first/);
  });
});
