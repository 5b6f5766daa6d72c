// A holder that leaves on purpose says so. A GPU worker stopping gracefully drains its contexts to disk,
// then sends each of their agents' workflows the update `holderLeft` (src/plugin/handover.ts). The
// workflow takes that holder for gone at once: the next call adopts the context from disk on another
// worker, as a failover does, without waiting out holderLossMs on a queue nobody serves, and a call
// already waiting there is cancelled and fails over too (HolderCalls.holderLeft).
//
// Only the agent's custodian may say so (its row in src/operations): the update must carry custodyProof
// of the custodian token the workflow carries, which the workflow shows only to the workers holding its
// context. A caller's token, another agent's or tenant's custodian, or a client that never saw the token
// cannot make the agent drop its holder. The validator refuses them, and a holderLeft naming a holder
// the agent has left since, before anything reaches the history. An update, not a signal: a signal's
// payload the codec refuses would fail the workflow task, while an update carrying it is only rejected.
import { log, setHandler } from '@temporalio/workflow';

import type { AgentRun } from './agent-run';
import { holderLeftUpdate, type HolderLeftArgs } from './definitions';
import { refusal } from './failures';
import type { HolderCalls } from './holder-calls';
import { checkCustodyProof } from './update-validators';

export function handleHolderLeft(run: AgentRun, calls: HolderCalls): void {
  setHandler(
    holderLeftUpdate,
    ({ holder }: HolderLeftArgs) => {
      log.info('holder left, its context on disk: the next call adopts it on another worker', { agentId: run.agentId, holder });
      run.holderLeft();
      calls.holderLeft(holder);
      return run.status();
    },
    { validator: (args: HolderLeftArgs) => checkHolderLeft(args, run) },
  );
}

function checkHolderLeft(args: unknown, run: AgentRun): void {
  if (run.released) throw refusal('INVALID_STATE', `agent ${run.agentId} is released`);
  const { holder, proof } = (typeof args === 'object' && args !== null ? args : {}) as Partial<Record<keyof HolderLeftArgs, unknown>>;
  checkCustodyProof(proof, run.ownCapability(), 'holderLeft');
  if (holder !== run.state.holder) throw refusal('INVALID_STATE', `agent ${run.agentId} is not held by that worker (any more)`);
}
