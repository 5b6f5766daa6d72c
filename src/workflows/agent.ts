// The agent workflow: one per agent, for the agent's whole life. It walks the lifecycle of lifecycle.ts,
// decides which tier the context lives in and which worker holds it, and keeps only counts and digests:
// no KV byte ever enters its history. Every update acts with the caller's own capability; what the
// workflow does on its own (allocation, timers, failover) it does with the agent's custodian token.
//
//   start           allocate the empty context on any worker (a fork's parent already made it)
//   updates         turn, suspend, resume, fork, pin, unpin, release, renew: one at a time (updates.ts)
//   timers          idle -> host memory, warm -> disk (timers.ts)
//   wake-ups        the owner plans one: the context comes back before it (wake-ups.ts)
//   holder lost     another worker adopts the context from disk (holder-calls.ts)
//   holder left     a worker that stopped gracefully says so: the next call adopts at once (holder-left.ts)
//   history long    continue-as-new with the state carried over
//   released        the workflow completes
import { allHandlersFinished, condition, continueAsNew } from '@temporalio/workflow';

import { AgentOperations } from './agent-operations';
import { AgentRun } from './agent-run';
import type { AgentInput, AgentStatus } from './definitions';
import { HolderCalls } from './holder-calls';
import { handleHolderLeft } from './holder-left';
import { runTimers } from './timers';
import { handleUpdates } from './updates';
import { handleWakes } from './wake-ups';

export async function agentWorkflow(input: AgentInput): Promise<AgentStatus> {
  const run = new AgentRun(input);
  const calls = new HolderCalls(run);
  const operations = new AgentOperations(run, calls);

  // Queued before the handlers exist: updates delivered with the first workflow task find it ahead of them.
  const allocated = input.carried || input.parent ? undefined : run.operation(() => operations.allocate());
  handleUpdates(run, operations);
  handleHolderLeft(run, calls);
  handleWakes(run);
  await allocated;

  await runTimers(run, operations);

  await condition(() => allHandlersFinished() && run.idle);
  if (run.released) return run.status();
  run.state.run++;
  return continueAsNew<typeof agentWorkflow>({ ...input, carried: run.state });
}
