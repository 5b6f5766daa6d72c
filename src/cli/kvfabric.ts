#!/usr/bin/env node
// The kvfabric CLI. Agent commands (start, turn, suspend, resume, fork, pin, unpin, release, renew, wake,
// status, list, setup) talk to Temporal with the worker's connection flags and environment (TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_TLS_*); calls on an agent act with its capability (--capability-file or
// KVFABRIC_CAPABILITY, never an argument: `ps` shows those), `wake` with its custodian token
// (--custodian-file or KVFABRIC_CUSTODIAN). `start` and `fork` print the new agent's capability and
// custodian token once (`renew` their replacements); nothing else ever prints one. Operator commands
// (keygen, codec-server, model) never connect.
// Failures are one line on stderr: exit 2 for a call used wrongly, 1 for one that failed.
import { AgentClient, type AgentHandle, type SkippedAgent } from '../client/agent-client';
import { clientSecurityFromEnv } from '../client/client-security';
import { registerSearchAttributes } from '../client/search-attributes';
import { FabricError } from '../fabric/errors';
import { printable } from '../identity/printable-id';
import type { AgentStatus, TurnOutcome } from '../workflows/definitions';
import { codecServer } from './codec-server-command';
import { USAGE, commandUsage } from './command-usage';
import { keygen } from './keygen';
import { model } from './model-command';
import { parseCommand } from './parse-command';
import { CliUsageError, USAGE_EXIT_CODE } from './usage-error';

/** Commands that take their own flags and never connect to Temporal; they come first on the line. */
const OPERATOR_COMMANDS = new Map<string, (argv: string[]) => void | Promise<void>>([
  ['keygen', (argv) => keygen(argv)],
  ['codec-server', (argv) => codecServer(argv)],
  ['model', (argv) => model(argv)],
]);

async function main(argv: string[]): Promise<void> {
  const [first, ...rest] = argv;
  const operator = first === undefined ? undefined : OPERATOR_COMMANDS.get(first);
  if (operator) {
    if (rest.includes('--help') || rest.includes('-h')) console.log(commandUsage(first!));
    else await operator(rest);
    return;
  }
  // Every argument is checked before connecting: bad input fails at once, naming what is wrong.
  const call = parseCommand(argv);
  if (call.command === 'help') {
    console.log(call.topic ? commandUsage(call.topic) : USAGE);
    return;
  }
  const agents = await AgentClient.connect(call.settings, clientSecurityFromEnv(), call.taskQueue);
  const print = (status: AgentStatus) => console.log(call.json ? JSON.stringify(status) : describe(status));
  const agent = (): AgentHandle => agents.agent(call.agentId!, call.capability!);
  const once = call.requestId === undefined ? {} : { requestId: call.requestId };
  try {
    switch (call.command) {
      case 'start': {
        const handle = await agents.start(call.start!);
        console.log(
          call.json
            ? JSON.stringify({ agentId: handle.agentId, capability: handle.capability, custodian: handle.custodian })
            : `started agent ${handle.agentId}\ncapability: ${handle.capability}\ncustodian: ${handle.custodian}`,
        );
        break;
      }
      case 'turn': {
        const outcome = await agent().turn(call.tokens ?? { message: call.message!, generation: call.generation ?? {} }, once);
        if (call.json) console.log(JSON.stringify(outcome));
        else {
          if (outcome.reply) console.log(outcome.reply.reply);
          console.log(describeTurn(call.agentId!, outcome));
        }
        break;
      }
      case 'suspend':
        print(await agent().suspend(call.tier!, once));
        break;
      case 'resume':
        print(await agent().resume(once));
        break;
      case 'fork': {
        const { child, status } = await agent().fork(call.childId!);
        if (call.json) console.log(JSON.stringify({ ...status, capability: child.capability, custodian: child.custodian }));
        else console.log(`${describe(status)}\ncapability: ${child.capability}\ncustodian: ${child.custodian}`);
        break;
      }
      case 'pin':
        print(await agent().pin(once));
        break;
      case 'unpin':
        print(await agent().unpin(once));
        break;
      case 'release':
        print(await agent().release(once));
        break;
      case 'renew': {
        const renewed = await agent().renew();
        console.log(
          call.json
            ? JSON.stringify({ agentId: renewed.agentId, capability: renewed.capability, custodian: renewed.custodian })
            : `renewed agent ${renewed.agentId}; the old capability and custodian are revoked\n` +
                `capability: ${renewed.capability}\ncustodian: ${renewed.custodian}`,
        );
        break;
      }
      case 'wake':
        print(await agents.wake(call.agentId!, call.custodian!, call.wakeAt ?? null, once));
        break;
      case 'status':
        print(await agents.status(call.agentId!));
        break;
      case 'list': {
        const { agents: listed, skipped } = await agents.list(call.list!);
        if (call.json) console.log(JSON.stringify(listed));
        else
          for (const a of listed)
            console.log(
              // Search attributes, which whoever starts a workflow sets: printed escaped.
              printable(
                `${a.agentId.padEnd(24)} ${a.tenant.padEnd(12)} ${String(a.phase).padEnd(8)} ` +
                  `${String(a.tier).padEnd(6)} ${String(a.tokens ?? '').padStart(8)} ` +
                  `tokens ${String(a.blocks ?? '').padStart(6)} blocks  ${a.status}`,
              ),
            );
        // On stderr, so stdout stays the listing (and --json stays one JSON value).
        for (const a of skipped) console.error(skippedLine(a));
        break;
      }
      case 'setup': {
        const added = await registerSearchAttributes(agents.connection!, call.settings.namespace);
        console.log(added.length > 0 ? `registered ${added.join(', ')}` : 'search attributes already registered');
        break;
      }
    }
  } finally {
    await agents.close();
  }
}

export function describe(s: AgentStatus): string {
  const resume = s.lastResume
    ? `, last resume ${(s.lastResume.bytes / 1024).toFixed(0)} KiB from ${s.lastResume.from} ` +
      `in ${(s.lastResume.transferMs + s.lastResume.verifyMs).toFixed(1)} ms`
    : '';
  return (
    `${s.agentId} (${s.tenant}, ${s.model}): ${s.phase}, ${s.tier}, ${s.tokens} tokens in ${s.blocks} blocks (${s.sharedBlocks} shared), ` +
    `${s.turns} turns${s.pinned ? ', pinned' : ''}${s.parentId ? `, fork of ${s.parentId}` : ''}; digest ${s.digest.slice(0, 16)}; ` +
    `held by ${s.holder ?? 'nobody'}; run ${s.run}, ${s.failovers} failovers, ${s.denials} denials${resume}` +
    (s.wake ? `; wake-up at ${new Date(s.wake.at).toISOString()} (prefetch ${(s.wake.leadMs / 1000).toFixed(1)} s before)` : '') +
    (s.durableCopyStale ? '; durable copy stale (disk full at the last checkpoint)' : '')
  );
}

/** A turn's line: the conversation's length after it (the agent's whole account: `status`). */
export function describeTurn(agentId: string, outcome: TurnOutcome): string {
  return (
    `${agentId}: turn ${outcome.turns}, ${outcome.tokens} tokens` +
    (outcome.durableCopyStale ? '; durable copy stale (disk full at the checkpoint)' : '')
  );
}

/** A listed agent this client cannot read: its id comes from a search attribute anyone starting a workflow sets, so it is escaped. */
export function skippedLine(agent: SkippedAgent): string {
  return `kvfabric: skipped agent ${printable(agent.agentId)} (${printable(agent.status)}): ${printable(agent.reason)}`;
}

/** The one line a failure prints: no stack trace, no usage dump. */
export function failureLine(err: unknown): string {
  if (err instanceof CliUsageError) return err.line();
  if (err instanceof FabricError) return `kvfabric: ${err.message} (${err.code})`;
  return `kvfabric: ${err instanceof Error ? err.message : String(err)}`;
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    console.error(failureLine(err));
    process.exit(err instanceof CliUsageError ? USAGE_EXIT_CODE : 1);
  });
}
