// Attack: making an agent drop a live holder. A GPU worker that stops gracefully tells each agent it drained
// that it left (the update `holderLeft`), and the agent's next call then adopts the context from disk on
// another worker. Anyone else who could send it could push agents off their holders at will: a restore
// elsewhere each time, and with durability 'on-offload' the turns only the holder had. The workflow admits
// it only with the proof of the custodian token it carries (custodyProof), which it shows to its holders
// alone. Another tenant's client with its own agent's custodian, the agent's own caller token, the
// custodian sent whole, a custodian the workflow never carried, an older one revoked by a renewal, and a
// plain client without the codec keys are all refused before anything reaches the history; the agent keeps
// its holder and serves its owner. The holder's own holderLeft after its drain is accepted. Real dev
// server, real workers (synthetic engine), the second one a process.
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { AgentHandle } from '../../../src/client/agent-client';
import { agentWorkflowId } from '../../../src/identity/agent-identity';
import { custodyProof, holderLeftUpdate, type HolderLeftArgs } from '../../../src/workflows/definitions';
import type { GpuWorker } from '../../../src/worker/gpu-worker';
import { TEST_AGENT_CONFIG, TINY, startCluster, type TestCluster } from '../../temporal/harness';

let cluster: TestCluster;
let holder: GpuWorker;
let holderRun: Promise<unknown>;

beforeAll(async () => {
  cluster = await startCluster();
  holder = await cluster.startWorker();
  holderRun = cluster.runs.at(-1)!;
});
afterAll(async () => cluster?.close());

/** An agent whose tokens the test minted, so that it knows the custodian its workflow carries. */
async function startAgent(agentId: string, tenant: string): Promise<{ agent: AgentHandle; capability: string; custodian: string }> {
  const capability = cluster.agents.mintCapability(agentId, tenant);
  const custodian = cluster.agents.mintCustodian(capability);
  const agent = await cluster.agents.start({ agentId, tenant, model: TINY, config: TEST_AGENT_CONFIG, capability, custodian });
  return { agent, capability, custodian };
}

/** What `holderLeft` with `args` came to: 'accepted', or the refusal's code (its message when it has none). */
async function holderLeft(args: unknown, client = cluster.client): Promise<string> {
  try {
    await client.workflow.getHandle(agentWorkflowId('victim')).executeUpdate(holderLeftUpdate, { args: [args as HolderLeftArgs] });
    return 'accepted';
  } catch (err) {
    expect(err).toBeInstanceOf(WorkflowUpdateFailedError);
    const cause = (err as WorkflowUpdateFailedError).cause;
    return cause instanceof ApplicationFailure && cause.type ? cause.type : String(cause?.message);
  }
}

async function acceptedHolderLefts(): Promise<number> {
  const { events } = await cluster.client.workflow.getHandle(agentWorkflowId('victim')).fetchHistory();
  return events!.filter((event) => event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === 'holderLeft')
    .length;
}

describe('attack: a holderLeft from anyone but the custodian', () => {
  it('is refused before it reaches the history, and the agent keeps its holder; the holder leaving for real is believed', async () => {
    const victim = await startAgent('victim', 'acme');
    const mallory = await startAgent('mallory', 'evil');
    await victim.agent.turn(16);
    await mallory.agent.turn(16);
    const before = await victim.agent.status();
    expect(before).toMatchObject({ holder: holder.holder, tier: 'device', failovers: 0 });
    // The worker knows the custodian the workflow showed it: what it will prove itself with.
    expect(holder.memory.custodyOf('victim')).toEqual({ workflowId: agentWorkflowId('victim'), token: victim.custodian });

    const on = { holder: holder.holder };
    // Another tenant's client, with the custodian of its own agent (on the same worker).
    expect(await holderLeft({ ...on, proof: custodyProof(mallory.custodian) })).toBe('PERMISSION_DENIED');
    // The agent's own caller: its token has every caller right, and still is not the custodian.
    expect(await holderLeft({ ...on, proof: custodyProof(victim.capability) })).toBe('PERMISSION_DENIED');
    // The custodian token itself, sent whole, is not its proof.
    expect(await holderLeft({ ...on, proof: victim.custodian })).toBe('PERMISSION_DENIED');
    // A custodian the control plane minted but the workflow never carried.
    expect(await holderLeft({ ...on, proof: custodyProof(cluster.agents.mintCustodian(victim.capability)) })).toBe('PERMISSION_DENIED');
    // No proof, or not even arguments of the right shape.
    expect(await holderLeft(on)).toBe('PERMISSION_DENIED');
    expect(await holderLeft('leave')).toBe('PERMISSION_DENIED');
    // Temporal's plain client, even with the right proof: the codec refuses its plaintext payload (the
    // reason is sealed: this client cannot read it).
    expect(await holderLeft({ ...on, proof: custodyProof(victim.custodian) }, cluster.rawClient)).not.toBe('accepted');
    // The right proof naming another worker: not this agent's holder, nothing to leave.
    expect(await holderLeft({ holder: `${cluster.taskQueue}@elsewhere`, proof: custodyProof(victim.custodian) })).toBe('INVALID_STATE');

    // A renewal revokes the custodian carried so far: its proof no longer counts either.
    const next = cluster.agents.mintRenewal(victim.capability);
    const renewedCustodian = cluster.agents.mintCustodian(next);
    const renewed = await victim.agent.renew(next, { nextCustodian: renewedCustodian });
    expect(await holderLeft({ ...on, proof: custodyProof(victim.custodian) })).toBe('PERMISSION_DENIED');
    expect(holder.memory.custodyOf('victim')?.token).toBe(renewedCustodian);

    // Nothing reached the history; the agent kept its holder and serves its owner there.
    expect(await acceptedHolderLefts()).toBe(0);
    expect(await renewed.turn(8)).toMatchObject({ turns: 2 });
    expect(await renewed.status()).toMatchObject({ holder: holder.holder, tier: 'device', failovers: 0, phase: 'idle' });

    // The holder itself leaving (drain, then holderLeft with the renewed custodian's proof) is believed.
    const heir = await cluster.spawnWorker({ workerId: 'heir' }); // a process: one worker per queue and connection here
    holder.shutdown();
    await holderRun;
    expect(await acceptedHolderLefts()).toBe(1);
    expect(await renewed.status()).toMatchObject({ holder: null, tier: 'disk', phase: 'cold', failovers: 0 });
    expect(await renewed.turn(8)).toMatchObject({ turns: 3 });
    expect(await renewed.status()).toMatchObject({ holder: heir.holder, failovers: 1 });
  });
});
