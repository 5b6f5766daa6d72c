// The agent commands' arguments, checked in full before anything connects: a malformed call fails at once
// with a CliUsageError that names the command, the argument and what it must be, and never reaches a
// workflow. (keygen and codec-server, which never connect, parse their own: keygen.ts, codec-server-command.ts.)
// A capability never comes on the command line, where `ps` shows it to every user: --capability-file PATH
// (a file only its owner can read) or KVFABRIC_CAPABILITY; nor does the custodian token `wake` takes
// (--custodian-file PATH or KVFABRIC_CUSTODIAN).
import { parseArgs } from 'node:util';

import { msToNumber } from '@temporalio/common/lib/time';

import type { ListFilter, StartAgentOptions } from '../client/agent-client';
import { FabricError } from '../fabric/errors';
import { AGENT_ID_RULE, isAgentId } from '../identity/agent-identity';
import { readProtectedFile } from '../security/protected-file';
import { TEMPORAL_FLAG_OPTIONS, temporalSettingsFromFlags, type TemporalSettings } from '../client/temporal-settings';
import { wholeNumber } from '../client/whole-number';
import type { GenerationSettings } from '../workflows/definitions';
import { modelNamed } from '../engines/models';
import { COMMAND_NAMES } from './command-usage';
import { CliUsageError } from './usage-error';

const COMMANDS = [
  'start',
  'turn',
  'suspend',
  'resume',
  'fork',
  'pin',
  'unpin',
  'release',
  'renew',
  'wake',
  'status',
  'list',
  'setup',
] as const;
type Command = (typeof COMMANDS)[number];
/** Commands that act on an agent with its capability. */
const WITH_CAPABILITY: ReadonlySet<Command> = new Set(['turn', 'suspend', 'resume', 'fork', 'pin', 'unpin', 'release', 'renew']);
/** Commands a script may retry with --request-id (fork and renew mint a capability each try: not these). */
const RETRIABLE: ReadonlySet<Command> = new Set(['turn', 'suspend', 'resume', 'pin', 'unpin', 'release', 'wake']);
const TIERS = ['device', 'host', 'disk'];
const PHASES = ['created', 'active', 'idle', 'warm', 'cold', 'resumed', 'released'];
/** Bounds --tokens before any call; the workflow's validator then checks the agent's own maxTurnTokens. */
const MAX_TOKENS = 0x7fffffff;

export interface CliCall {
  command: Command | 'help';
  /** For help: the command whose usage to print (none: the overview). */
  topic?: string;
  settings: TemporalSettings;
  taskQueue: string;
  json: boolean;
  agentId?: string;
  childId?: string;
  capability?: string;
  tokens?: number;
  message?: string;
  generation?: GenerationSettings;
  tier?: 'host' | 'disk';
  /** wake: the agent's custodian token (only its proof is sent), and the instant in ms since the epoch, or null to cancel. */
  custodian?: string;
  wakeAt?: number | null;
  /** The caller's request id: the same call sent again returns the first result (AgentHandle's CallOptions). */
  requestId?: string;
  start?: StartAgentOptions;
  list?: ListFilter;
}

export function parseCommand(argv: string[], env: NodeJS.ProcessEnv = process.env): CliCall {
  try {
    return parseCall(argv, env);
  } catch (err) {
    // Every message below is about the command the call names, which the error line then names.
    if (err instanceof CliUsageError && err.command === undefined) throw new CliUsageError(err.message, commandIn(argv));
    throw err;
  }
}

/** The first argument that names a command (best effort: only for naming it in an error). */
function commandIn(argv: string[]): Command | undefined {
  return argv.find((arg): arg is Command => (COMMANDS as readonly string[]).includes(arg));
}

function parseCall(argv: string[], env: NodeJS.ProcessEnv): CliCall {
  refuseCapabilityArgument(argv);
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        tenant: { type: 'string' },
        model: { type: 'string' },
        tokens: { type: 'string' },
        message: { type: 'string' },
        'max-tokens': { type: 'string' },
        seed: { type: 'string' },
        temperature: { type: 'string' },
        tier: { type: 'string' },
        phase: { type: 'string' },
        all: { type: 'boolean' },
        'capability-file': { type: 'string' },
        'custodian-file': { type: 'string' },
        at: { type: 'string' },
        in: { type: 'string' },
        cancel: { type: 'boolean' },
        'idle-to-warm': { type: 'string' },
        'warm-to-cold': { type: 'string' },
        durability: { type: 'string' },
        'task-queue': { type: 'string' },
        'request-id': { type: 'string' },
        ...TEMPORAL_FLAG_OPTIONS,
        'connect-timeout': { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    throw usage((err as Error).message);
  }
  const { values, positionals } = parsed;
  const [name, agentId, childId, ...extra] = positionals;
  const connectTimeout = duration(values['connect-timeout'], '--connect-timeout');
  let settings: TemporalSettings;
  try {
    settings = temporalSettingsFromFlags(values, env);
  } catch (err) {
    throw usage((err as Error).message);
  }
  const base = {
    settings: connectTimeout === undefined ? settings : { ...settings, connectTimeoutMs: connectTimeout },
    taskQueue: values['task-queue'] ?? env.KVFABRIC_TASK_QUEUE ?? 'kvfabric',
    json: values.json ?? false,
  };
  if (!name || name === 'help' || values.help) return { command: 'help', ...helpTopic(name === 'help' ? agentId : name), ...base };
  if (COMMAND_NAMES.includes(name) && !(COMMANDS as readonly string[]).includes(name))
    throw usage(`put ${name} first: kvfabric ${name} [options]`);
  if (!(COMMANDS as readonly string[]).includes(name)) throw usage(`unknown command '${name}'`);
  const command = name as Command;
  const expected = command === 'fork' ? 2 : command === 'list' || command === 'setup' ? 0 : 1;
  const given = [agentId, childId, ...extra].filter((arg) => arg !== undefined).length;
  if (given < expected) throw usage(`needs ${expected === 2 ? 'an agent id and a child id' : 'an agent id'}`);
  if (given > expected) throw usage(`takes ${expected} argument(s), got ${given}: ${positionals.slice(1).join(' ')}`);
  const call: CliCall = { command, ...base };
  if (agentId !== undefined) call.agentId = checkedId(agentId, 'agent id');
  if (childId !== undefined) call.childId = checkedId(childId, 'child id');
  const capabilityFile = values['capability-file'];
  if (capabilityFile !== undefined && !WITH_CAPABILITY.has(command) && command !== 'start')
    throw usage(`--capability-file is for start, ${[...WITH_CAPABILITY].join(', ')}`);
  if (WITH_CAPABILITY.has(command) && capabilityFile === undefined && !env.KVFABRIC_CAPABILITY)
    throw usage('acts on the agent: pass --capability-file PATH or set KVFABRIC_CAPABILITY');
  const custodianFile = values['custodian-file'];
  if (custodianFile !== undefined && command !== 'wake') throw usage('--custodian-file is for wake');
  if (values['request-id'] !== undefined) {
    if (!RETRIABLE.has(command)) throw usage(`--request-id is for ${[...RETRIABLE].join(', ')}`);
    if (values['request-id'].length === 0 || values['request-id'].length > 200) throw usage('--request-id must have 1 to 200 characters');
    call.requestId = values['request-id'];
  }
  switch (command) {
    case 'start':
      call.start = startOptions(call.agentId!, values);
      break;
    case 'turn':
      if (values.tokens === undefined && values.message === undefined) throw usage('--message or --tokens is required');
      if (values.tokens !== undefined && values.message !== undefined) throw usage('--message and --tokens exclude each other: give one');
      if (values.tokens !== undefined) {
        call.tokens = wholeNumberFlag(values.tokens, '--tokens', 1, MAX_TOKENS);
      } else {
        call.message = values.message!;
        call.generation = {
          ...(values['max-tokens'] !== undefined
            ? { maxTokens: wholeNumberFlag(values['max-tokens'], '--max-tokens', 1, MAX_TOKENS) }
            : {}),
          ...(values.seed !== undefined ? { seed: wholeNumberFlag(values.seed, '--seed', 0) } : {}),
          ...(values.temperature !== undefined ? { temperature: temperatureOf(values.temperature) } : {}),
        };
      }
      break;
    case 'suspend': {
      const tier = values.tier ?? 'disk';
      if (tier !== 'host' && tier !== 'disk') throw usage(`--tier must be host or disk, got '${tier}'`);
      call.tier = tier;
      break;
    }
    case 'wake':
      call.wakeAt = wakeAtOf(values);
      if (custodianFile === undefined && !env.KVFABRIC_CUSTODIAN)
        throw usage("plans the owner's wake-up: pass --custodian-file PATH or set KVFABRIC_CUSTODIAN (start printed the custodian)");
      break;
    case 'list':
      if (values.tier !== undefined && !TIERS.includes(values.tier))
        throw usage(`--tier must be one of ${TIERS.join(', ')}, got '${values.tier}'`);
      if (values.phase !== undefined && !PHASES.includes(values.phase))
        throw usage(`--phase must be one of ${PHASES.join(', ')}, got '${values.phase}'`);
      call.list = {
        ...(values.tenant ? { tenant: values.tenant } : {}),
        ...(values.tier ? { tier: values.tier } : {}),
        ...(values.phase ? { phase: values.phase } : {}),
        includeClosed: values.all ?? false,
      };
      break;
    default:
      break;
  }
  // Read last, so that a malformed call is refused for what is wrong with it before any file is opened.
  // The file given on this call wins over the variable exported for the shell session; `start` takes only
  // the file: a KVFABRIC_CAPABILITY exported for another agent must not start this one.
  const fromFile = capabilityFile === undefined ? undefined : secretFrom(capabilityFile, '--capability-file');
  if (WITH_CAPABILITY.has(command)) call.capability = fromFile ?? env.KVFABRIC_CAPABILITY;
  else if (fromFile !== undefined) call.start = { ...call.start!, capability: fromFile };
  if (command === 'wake')
    call.custodian = custodianFile === undefined ? env.KVFABRIC_CUSTODIAN : secretFrom(custodianFile, '--custodian-file');
  return call;
}

/** `wake`'s instant: exactly one of --at (an ISO 8601 time with its zone), --in (a duration from now), --cancel (null). */
function wakeAtOf(values: { at?: string | undefined; in?: string | undefined; cancel?: boolean | undefined }): number | null {
  const given = [values.at !== undefined, values.in !== undefined, values.cancel === true].filter(Boolean).length;
  if (given !== 1) throw usage('takes one of --at TIME, --in DURATION or --cancel');
  if (values.cancel) return null;
  if (values.in !== undefined) return Date.now() + duration(values.in, '--in')!;
  const at = values.at!;
  const ms = ISO_INSTANT.test(at) ? Date.parse(at) : Number.NaN;
  if (!Number.isSafeInteger(ms) || ms < 0)
    throw usage(`--at must be an ISO 8601 time with its zone, such as 2026-12-04T09:00:00Z or 2026-12-04T09:00+01:00, got '${at}'`);
  return ms;
}

/** A date, a time to the minute or finer, and its zone (Z or an offset): a time without one is ambiguous. */
const ISO_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2})$/;

function startOptions(agentId: string, values: Record<string, string | boolean | undefined>): StartAgentOptions {
  const tenant = values.tenant as string | undefined;
  if (!tenant) throw usage('--tenant is required');
  const durability = values.durability as string | undefined;
  if (durability !== undefined && durability !== 'every-turn' && durability !== 'on-offload')
    throw usage(`--durability must be every-turn or on-offload, got '${durability}'`);
  const model = values.model as string | undefined;
  if (model !== undefined) {
    try {
      modelNamed(model);
    } catch (err) {
      throw usage((err as Error).message);
    }
  }
  const idleToWarm = duration(values['idle-to-warm'] as string | undefined, '--idle-to-warm');
  const warmToCold = duration(values['warm-to-cold'] as string | undefined, '--warm-to-cold');
  return {
    agentId,
    tenant,
    ...(model ? { model } : {}),
    config: {
      timers: {
        ...(idleToWarm !== undefined ? { idleToWarmMs: idleToWarm } : {}),
        ...(warmToCold !== undefined ? { warmToColdMs: warmToCold } : {}),
      },
      ...(durability ? { durability: durability as 'every-turn' | 'on-offload' } : {}),
    },
  };
}

/** `--capability VALUE` (or `--custodian VALUE`) would show in `ps` to every user of the machine: refused, saying where it goes instead. */
function refuseCapabilityArgument(argv: string[]): void {
  const end = argv.indexOf('--');
  const options = end === -1 ? argv : argv.slice(0, end);
  for (const [flag, what, variable] of [
    ['capability', 'the capability', 'KVFABRIC_CAPABILITY'],
    ['custodian', 'the custodian token', 'KVFABRIC_CUSTODIAN'],
  ] as const) {
    if (options.some((arg) => arg === `--${flag}` || arg.startsWith(`--${flag}=`))) {
      throw usage(
        `--${flag} is not taken on the command line, where ps shows it to every user: ` +
          `put ${what} in a file only you can read (chmod 600) ` +
          `and pass --${flag}-file PATH, or set ${variable}`,
      );
    }
  }
}

/** The token in the file (trimmed); refused when others can read the file (protected-file.ts). */
function secretFrom(path: string, flag: string): string {
  const token = readProtectedFile(path, flag, 'secret').trim();
  if (token.length === 0) throw new FabricError('INVALID_ARGUMENT', `${flag}: ${path} is empty`);
  return token;
}

function checkedId(id: string, what: string): string {
  if (!isAgentId(id)) throw usage(`${what} '${id}' is not valid: ${AGENT_ID_RULE}`);
  return id;
}

/** A whole number flag in [min, max] (whole-number.ts), as a usage error when it is not one. */
function wholeNumberFlag(text: string | undefined, flag: string, min: number, max?: number): number {
  if (text === undefined) throw usage(`missing ${flag}`);
  try {
    return wholeNumber(text, flag, min, max);
  } catch (err) {
    throw usage((err as Error).message);
  }
}

function temperatureOf(text: string): number {
  const value = Number(text);
  if (text.trim() === '' || !(value >= 0 && value <= 2)) throw usage(`--temperature must be a number from 0 to 2, got '${text}'`);
  return value;
}

function duration(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  let ms: number;
  try {
    ms = msToNumber(text as '1s');
  } catch {
    throw usage(`${flag} must be a duration such as 90s, 10m or 1h, got '${text}'`);
  }
  if (!Number.isFinite(ms) || ms <= 0) throw usage(`${flag} must be a positive duration, got '${text}'`);
  return ms;
}

/** `kvfabric help [command]`, `kvfabric [command] --help`: an unknown command is an error, not the overview. */
function helpTopic(topic: string | undefined): { topic?: string } {
  if (topic !== undefined && !COMMAND_NAMES.includes(topic)) throw usage(`unknown command '${topic}'`);
  return topic ? { topic } : {};
}

/** The command is attached by parseCommand, which knows which one the call named. */
function usage(message: string): CliUsageError {
  return new CliUsageError(message);
}
