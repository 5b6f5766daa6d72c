// The worker's activities as Temporal runs them: each call inside an activity context whose workflow id
// and run id say which workflow is calling (what the server tells a worker, never the request), over a
// real AgentMemory (native pool, cold tier, grants, epochs, audit log: ../memory-fixture.ts).
import { readFileSync } from 'node:fs';

import { MockActivityEnvironment } from '@temporalio/testing';

import { createActivities, OperationJournal } from '../../../src/activities';
import { emptyDigest } from '../../../src/agent-memory/context-digest';
import { MODELS } from '../../../src/engines/models';
import { agentWorkflowId } from '../../../src/identity/agent-identity';
import type { MemoryFixture } from '../memory-fixture';

export type Activities = ReturnType<typeof createActivities>;

export interface Caller {
  workflowId: string;
  runId: string;
  attempt?: number;
}

/** The agent's own workflow, in its first run unless told otherwise. */
export function workflowOf(agentId: string, runId = 'run-1'): Caller {
  return { workflowId: agentWorkflowId(agentId), runId };
}

/** Runs `call` as an activity of `caller`'s workflow. */
export function as<T>(caller: Caller, call: () => Promise<T>): Promise<T> {
  const environment = new MockActivityEnvironment({
    workflowExecution: { workflowId: caller.workflowId, runId: caller.runId },
    attempt: caller.attempt ?? 1,
  });
  return environment.run(call);
}

export function activitiesOf(fx: MemoryFixture, journal = new OperationJournal()): Activities {
  return createActivities({ memory: fx.memory, holder: 'queue@victim-worker', runsWorkflows: true, journal });
}

/** Starts the agent as its workflow does: its context allocated, then one turn of 32 tokens, each written to the cold tier. */
export async function startAgent(fx: MemoryFixture, agentId: string, tenant: string): Promise<void> {
  const activities = activitiesOf(fx);
  const base = { agentId, tenant, capability: fx.token(agentId, tenant) };
  await as(workflowOf(agentId), () =>
    activities.placement.allocate({
      ...base,
      operationId: `${agentId}:0`,
      shape: MODELS.tiny!.shape,
      tokensPerBlock: MODELS.tiny!.tokensPerBlock,
      checkpoint: true,
    }),
  );
  await as(workflowOf(agentId), () =>
    activities.holder.turn({ ...base, operationId: `${agentId}:1`, turn: 0, tokens: 32, before: emptyDigest(), checkpoint: true }),
  );
}

/** The audit log's denials, parsed. */
export function denials(fx: MemoryFixture): Array<Record<string, unknown>> {
  let text = '';
  try {
    text = readFileSync(fx.auditFile, 'utf8');
  } catch {
    return [];
  }
  return text
    .trim()
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** A caller other than the victim, with the token it presents and the denial reason the audit log records. */
export interface Intruder {
  name: string;
  caller: () => Caller;
  tenant: string;
  capability: () => string;
  reason: string;
}

/**
 * The callers every attack on the victim's context is tried by: another tenant with no token and with
 * its own agent's, a sibling agent of the same tenant, and the victim's own token from another workflow.
 */
export function intrudersOf(fx: () => MemoryFixture, victimToken: () => string): Intruder[] {
  return [
    {
      name: 'another tenant, no valid token',
      caller: () => workflowOf('mallory'),
      tenant: 'globex',
      capability: () => 'not-a-token',
      reason: 'malformed',
    },
    {
      name: "another tenant with its own agent's token",
      caller: () => workflowOf('mallory'),
      tenant: 'globex',
      capability: () => fx().token('mallory', 'globex'),
      reason: 'wrong-context',
    },
    {
      name: 'another agent of the same tenant',
      caller: () => workflowOf('sibling'),
      tenant: 'acme',
      capability: () => fx().token('sibling'),
      reason: 'wrong-context',
    },
    {
      name: "the victim's own token, presented from another workflow",
      caller: () => workflowOf('mallory'),
      tenant: 'acme',
      capability: victimToken,
      reason: 'wrong-workflow',
    },
  ];
}
