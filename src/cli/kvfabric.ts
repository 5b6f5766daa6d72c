// The kvfabric CLI: start an agent, run a turn, suspend, resume, fork, pin, unpin, release, status, list.
// Connection flags and environment are the worker's (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_TLS_*).
// Calls on an agent act with its capability: --capability or KVFABRIC_CAPABILITY. `start` and `fork` print
// the new agent's capability once (`renew` its replacement); nothing else ever prints one.
import { parseArgs } from 'node:util';

import { msToNumber } from '@temporalio/common/lib/time';

import { AgentClient, type AgentHandle } from '../client/agent-client';
import { clientSecurityFromEnv } from '../client/client-security';
import { registerSearchAttributes } from '../client/search-attributes';
import { TEMPORAL_FLAG_OPTIONS, temporalSettingsFromFlags } from '../client/temporal-settings';
import { FabricError } from '../fabric/errors';
import type { AgentStatus } from '../workflows/definitions';

const USAGE = `Usage: kvfabric <command> [args] [options]

  start <agent> --tenant T [--model llama-3-8b|tiny|LxHxDxB] [--idle-to-warm 10m] [--warm-to-cold 1h]
                [--durability every-turn|on-offload] [--verify always|from-disk]
                                                           prints the agent's capability: keep it
  turn <agent> --tokens N
  suspend <agent> [--tier disk|host]
  resume <agent>                                           restores and verifies the context
  fork <agent> <child>                                     prints the child's capability
  pin <agent> | unpin <agent> | release <agent>
  renew <agent>                                            new capability (fresh expiry), old one revoked; prints it
  status <agent>
  list [--tenant T] [--tier device|host|disk] [--phase P] [--all]
  setup                                                    registers the search attributes on a cluster

Keys (environment or files, never flags): KVFABRIC_CODEC_KEYS (payload codec, required),
         KVFABRIC_SIGNING_KEYS (capability issuer: start and fork mint capabilities with it).
Options: --capability C (KVFABRIC_CAPABILITY), --task-queue Q (KVFABRIC_TASK_QUEUE, default kvfabric),
         --address, --namespace, --tls, --tls-cert, --tls-key, --tls-ca, --tls-server-name, --json`;

async function main(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      tenant: { type: 'string' },
      model: { type: 'string' },
      tokens: { type: 'string' },
      tier: { type: 'string' },
      phase: { type: 'string' },
      all: { type: 'boolean' },
      capability: { type: 'string' },
      'idle-to-warm': { type: 'string' },
      'warm-to-cold': { type: 'string' },
      durability: { type: 'string' },
      verify: { type: 'string' },
      'task-queue': { type: 'string' },
      ...TEMPORAL_FLAG_OPTIONS,
      json: { type: 'boolean' },
      help: { type: 'boolean' },
    },
  });
  const [command, agentId, childId] = positionals;
  if (!command || values.help) {
    console.log(USAGE);
    return;
  }
  const settings = temporalSettingsFromFlags(values);
  const agents = await AgentClient.connect(settings, clientSecurityFromEnv(), values['task-queue'] ?? process.env.KVFABRIC_TASK_QUEUE ?? 'kvfabric');
  const print = (status: AgentStatus) => console.log(values.json ? JSON.stringify(status) : describe(status));
  const agent = (): AgentHandle => {
    const capability = values.capability ?? process.env.KVFABRIC_CAPABILITY;
    if (!capability) throw new Error('this command acts on the agent: pass --capability or set KVFABRIC_CAPABILITY');
    return agents.agent(required(agentId, 'agent id'), capability);
  };
  try {
    switch (command) {
      case 'start': {
        const durability = values.durability;
        if (durability !== undefined && durability !== 'every-turn' && durability !== 'on-offload') throw new Error('--durability must be every-turn or on-offload');
        const verify = values.verify;
        if (verify !== undefined && verify !== 'always' && verify !== 'from-disk') throw new Error('--verify must be always or from-disk');
        const handle = await agents.start({
          agentId: required(agentId, 'agent id'),
          tenant: required(values.tenant, '--tenant'),
          ...(values.model ? { model: values.model } : {}),
          ...(values.capability ? { capability: values.capability } : {}),
          config: {
            timers: {
              ...(values['idle-to-warm'] ? { idleToWarmMs: msToNumber(values['idle-to-warm'] as '1s') } : {}),
              ...(values['warm-to-cold'] ? { warmToColdMs: msToNumber(values['warm-to-cold'] as '1s') } : {}),
            },
            ...(durability ? { durability } : {}),
            ...(verify ? { verifyRestores: verify } : {}),
          },
        });
        console.log(values.json ? JSON.stringify({ agentId: handle.agentId, capability: handle.capability }) : `started agent ${handle.agentId}\ncapability: ${handle.capability}`);
        break;
      }
      case 'turn':
        print(await agent().turn(Number(required(values.tokens, '--tokens'))));
        break;
      case 'suspend': {
        const tier = values.tier ?? 'disk';
        if (tier !== 'host' && tier !== 'disk') throw new Error('--tier must be host or disk');
        print(await agent().suspend(tier));
        break;
      }
      case 'resume':
        print(await agent().resume());
        break;
      case 'fork': {
        const { child, status } = await agent().fork(required(childId, 'child id'));
        if (values.json) console.log(JSON.stringify({ ...status, capability: child.capability }));
        else console.log(`${describe(status)}\ncapability: ${child.capability}`);
        break;
      }
      case 'pin':
        print(await agent().pin());
        break;
      case 'unpin':
        print(await agent().unpin());
        break;
      case 'release':
        print(await agent().release());
        break;
      case 'renew': {
        const renewed = await agent().renew();
        console.log(values.json ? JSON.stringify({ agentId: renewed.agentId, capability: renewed.capability }) : `renewed agent ${renewed.agentId}; the old capability is revoked\ncapability: ${renewed.capability}`);
        break;
      }
      case 'status':
        print(await agents.status(required(agentId, 'agent id')));
        break;
      case 'list': {
        const listed = await agents.list({
          ...(values.tenant ? { tenant: values.tenant } : {}),
          ...(values.tier ? { tier: values.tier } : {}),
          ...(values.phase ? { phase: values.phase } : {}),
          includeClosed: values.all ?? false,
        });
        if (values.json) console.log(JSON.stringify(listed));
        else for (const a of listed) console.log(`${a.agentId.padEnd(24)} ${a.tenant.padEnd(12)} ${String(a.phase).padEnd(8)} ${String(a.tier).padEnd(6)} ${String(a.tokens ?? '').padStart(8)} tokens ${String(a.blocks ?? '').padStart(6)} blocks  ${a.status}`);
        break;
      }
      case 'setup': {
        const added = await registerSearchAttributes(agents.connection!, settings.namespace);
        console.log(added.length > 0 ? `registered ${added.join(', ')}` : 'search attributes already registered');
        break;
      }
      default:
        throw new Error(`unknown command '${command}'\n\n${USAGE}`);
    }
  } finally {
    await agents.close();
  }
}

export function describe(s: AgentStatus): string {
  const restore = s.lastRestore ? `, last restore ${(s.lastRestore.bytes / 1024).toFixed(0)} KiB from ${s.lastRestore.from} in ${(s.lastRestore.transferMs + s.lastRestore.verifyMs).toFixed(1)} ms` : '';
  return (
    `${s.agentId} (${s.tenant}, ${s.model}): ${s.phase}, ${s.tier}, ${s.tokens} tokens in ${s.blocks} blocks (${s.sharedBlocks} shared), ` +
    `${s.turns} turns${s.pinned ? ', pinned' : ''}${s.parentId ? `, fork of ${s.parentId}` : ''}; digest ${s.digest.slice(0, 16)}; ` +
    `held by ${s.holder ?? 'nobody'}; run ${s.run}, ${s.failovers} failovers, ${s.denials} denials${restore}`
  );
}

function required<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new Error(`missing ${what}\n\n${USAGE}`);
  return value;
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    console.error(err instanceof FabricError ? `${err.code}: ${err.message}` : err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
