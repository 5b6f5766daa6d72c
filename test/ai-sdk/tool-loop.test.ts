// An agent written with the AI SDK on a real dev server, its model calls through @temporalio/ai-sdk's
// invokeModel activity on a worker that also runs kvfabric, with the real model: a 4-step tool loop
// evaluates only what each step adds, where the same loop through a provider that keeps no KV evaluates
// the whole conversation every step, and the two loops reply the same (greedy). Each workflow run has KV
// of its own: another run with the same prompt reuses nothing of it. Once a run has ended, the worker's
// housekeeping frees its KV, in memory and in the cold tier.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

import { AiSdkPlugin } from '@temporalio/ai-sdk';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { modelCallContextId } from '../../src/ai-sdk/model-call-owner';
import { LlamaEngine } from '../../src/engines/llama/llama-engine';
import { manifestFileName } from '../../src/tiers/cold/context-names';
import { KvFabricWorkerPlugin } from '../../src/plugin/worker-plugin';
import { plainModelCalls, providerOf } from '../support/plain-model-calls';
import { eventually, startCluster, type TestCluster } from '../temporal/harness';
import type { LoopStep, cancelledCall, divergingAgent, idleAgent, researchAgent, researchAndRelease } from './research-workflows';

const CONTEXT_LENGTH = 2048;
const QUESTION = 'What does kvfabric keep for AI agents?';

let cluster: TestCluster;
let plainEngine: LlamaEngine;
let kvfabric: KvFabricWorkerPlugin;
let connection: NativeConnection;
let worker: Worker;
let running: Promise<void>;

beforeAll(async () => {
  cluster = await startCluster();
  plainEngine = await LlamaEngine.open({ contextLength: CONTEXT_LENGTH, hotContexts: 1 });
  const config = cluster.workerConfig({
    engine: { name: 'llama', model: undefined, contextLength: CONTEXT_LENGTH },
    pool: { deviceBlocks: 1024, hostBlocks: 1024 },
    chores: {
      housekeepingMs: 1000, // the sweep that frees ended runs' KV
      modelCallIdle: { toHostMs: 1500, toDiskMs: 1000 }, // a second and a half idle, and a run's KV leaves the engine
      prefixIdleMs: 0, // a run's shared prefix goes with the run's KV: each test's first run finds none
    },
  });
  kvfabric = new KvFabricWorkerPlugin({ ...config, agentWorkflows: false });
  const modelProvider = kvfabric.modelProvider({ fallback: providerOf(plainModelCalls(plainEngine)) });
  connection = await NativeConnection.connect({ address: cluster.server.address });
  worker = await Worker.create({
    connection,
    taskQueue: cluster.taskQueue,
    workflowsPath: join(__dirname, 'research-workflows.ts'),
    plugins: [kvfabric, new AiSdkPlugin({ modelProvider })],
  });
  running = worker.run();
}, 300_000);

afterAll(async () => {
  if (worker?.getState() === 'RUNNING') worker.shutdown();
  await running?.catch(() => undefined);
  await connection?.close();
  await plainEngine?.close();
  await cluster?.close();
});

function research(modelId: string, steps: number): Promise<LoopStep[]> {
  return cluster.client.workflow.execute<typeof researchAgent>('researchAgent', {
    taskQueue: cluster.taskQueue,
    workflowId: `research-${randomBytes(4).toString('hex')}`,
    args: [{ modelId, question: QUESTION, steps }],
    workflowExecutionTimeout: '10 minutes',
  });
}

describe('an AI SDK tool loop on kvfabric', () => {
  it('evaluates only what each step adds, and replies as a loop that keeps no KV', async () => {
    const kept = await research('kvfabric', 4);
    const plain = await research('plain', 4);
    console.log(
      'tokens evaluated per step, kvfabric / no KV kept:',
      kept.map((step, i) => `${step.evaluatedTokens}/${plain[i]!.evaluatedTokens}`).join(', '),
      '; reused by kvfabric:',
      kept.map((step) => step.reusedTokens).join(', '),
    );

    expect(kept.map((step) => step.toolCalls.map((call) => call.toolName))).toEqual([['search'], ['read'], ['search'], []]);
    // The same prompts token for token, the same tool calls and the same answer: the KV kvfabric continued
    // is the KV a fresh evaluation makes.
    expect(kept.map((step) => [step.inputTokens, step.toolCalls, step.text])).toEqual(
      plain.map((step) => [step.inputTokens, step.toolCalls, step.text]),
    );
    // Without KV kept, every step evaluates its whole prompt.
    for (const step of plain) {
      expect(step.reusedTokens).toBe(0);
      expect(step.evaluatedTokens).toBe(step.inputTokens);
    }
    // Step 1 evaluates its prompt; every later step continues all the step before it saw and said, and
    // evaluates only the tool's result and what frames it.
    expect(kept[0]!.reusedTokens).toBe(0);
    for (const [i, step] of kept.entries()) {
      expect(step.reusedTokens! + step.evaluatedTokens!).toBe(step.inputTokens);
      if (i === 0) continue;
      const before = kept[i - 1]!;
      expect(step.reusedTokens).toBeGreaterThanOrEqual(before.inputTokens! + before.outputTokens!);
      expect(step.evaluatedTokens).toBeLessThan(64);
    }
  });

  it("gives each workflow run KV of its own, a second run of the tenant taking only the first prompt's shared full blocks", async () => {
    const first = await research('kvfabric', 2);
    const second = await research('kvfabric', 2);
    expect(first[0]!.reusedTokens).toBe(0);
    // Prefix sharing within the tenant (the namespace): whole 16-token blocks of the same prompt, never the
    // first run's own context (its reply and later steps).
    expect(second[0]!.reusedTokens! % 16).toBe(0);
    expect(second[0]!.reusedTokens).toBeGreaterThan(0);
    expect(second[0]!.reusedTokens).toBeLessThan(second[0]!.inputTokens!);
    expect(second.map((step) => step.text)).toEqual(first.map((step) => step.text));
  });

  it('frees a run’s KV, in memory and in the cold tier, once the run has ended', async () => {
    const handle = await cluster.client.workflow.start<typeof researchAgent>('researchAgent', {
      taskQueue: cluster.taskQueue,
      workflowId: `research-${randomBytes(4).toString('hex')}`,
      args: [{ modelId: 'kvfabric', question: QUESTION, steps: 2 }],
    });
    await handle.result();
    const id = modelCallContextId({
      namespace: 'default',
      workflowId: handle.workflowId,
      runId: handle.firstExecutionRunId,
      tenant: 'default',
    });
    const manifest = join(cluster.tierDir, 'cold', 'manifests', manifestFileName(id));
    await eventually(
      async () => (!kvfabric.memory.heldContextIds().includes(id) && !existsSync(manifest) ? true : undefined),
      30_000,
      'the ended run’s KV to be freed',
    );
  });

  it('frees a run’s KV when its workflow asks (releaseModelMemory)', async () => {
    const workflowId = `research-${randomBytes(4).toString('hex')}`;
    const handle = await cluster.client.workflow.start<typeof researchAndRelease>('researchAndRelease', {
      taskQueue: cluster.taskQueue,
      workflowId,
      args: [{ modelId: 'kvfabric', question: QUESTION, steps: 1 }],
    });
    const { released } = await handle.result();
    expect(released).toBe(true);
    const id = modelCallContextId({ namespace: 'default', workflowId, runId: handle.firstExecutionRunId, tenant: 'default' });
    expect(kvfabric.memory.heldContextIds()).not.toContain(id);
    expect(existsSync(join(cluster.tierDir, 'cold', 'manifests', manifestFileName(id)))).toBe(false);
  });

  it('holds one copy of @temporalio/workflow, so cancelling a model call cancels it at once', async () => {
    // The npm overrides in package.json map @temporalio/ai-sdk's pinned @temporalio/* to the project's.
    const fromAiSdk = require.resolve('@temporalio/workflow', { paths: [dirname(require.resolve('@temporalio/ai-sdk'))] });
    expect(fromAiSdk).toBe(require.resolve('@temporalio/workflow'));
    const started = Date.now();
    const outcome = await cluster.client.workflow.execute<typeof cancelledCall>('cancelledCall', {
      taskQueue: cluster.taskQueue,
      workflowId: `cancel-${randomBytes(4).toString('hex')}`,
      args: ['kvfabric'],
    });
    expect(outcome).toBe('cancelled');
    // A thousand tokens take the model tens of seconds here: the workflow did not wait for them.
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('moves an idle run’s KV out of the engine to host memory, then disk, and continues it from there', async () => {
    const workflowId = `idle-${randomBytes(4).toString('hex')}`;
    const handle = await cluster.client.workflow.start<typeof idleAgent>('idleAgent', {
      taskQueue: cluster.taskQueue,
      workflowId,
      args: ['kvfabric', QUESTION],
    });
    const id = modelCallContextId({ namespace: 'default', workflowId, runId: handle.firstExecutionRunId, tenant: 'default' });
    const tiersSeen = new Set<string>();
    await eventually(
      async () => {
        if (kvfabric.memory.holds(id)) tiersSeen.add(kvfabric.memory.snapshot(id).tier);
        return tiersSeen.has('disk') ? true : undefined;
      },
      60_000,
      'the idle run’s KV to reach disk',
    );
    await handle.signal('followUp', 'Say it again in five words.');
    const [first, second] = await handle.result();
    expect(first!.resumedFrom).toBe('empty');
    expect(second).toMatchObject({ resumedFrom: 'stored' });
    expect(second!.reusedTokens).toBeGreaterThanOrEqual(first!.inputTokens! + first!.outputTokens!);
  });

  it('continues only the prefix a departing message list shares, and replies as a fresh run does', async () => {
    const systems: [string, string] = ['You answer briefly.', 'You answer in French.'];
    const run = (modelId: string, pair: [string, string]) =>
      cluster.client.workflow.execute<typeof divergingAgent>('divergingAgent', {
        taskQueue: cluster.taskQueue,
        workflowId: `diverging-${randomBytes(4).toString('hex')}`,
        args: [modelId, QUESTION, pair],
      });
    const [, edited] = await run('kvfabric', systems);
    // The two prompts share the system block's opening and nothing after its text starts to differ.
    expect(edited!.reusedTokens).toBeGreaterThan(0);
    expect(edited!.reusedTokens).toBeLessThan(8);
    expect(edited!.reusedTokens! + edited!.evaluatedTokens!).toBe(edited!.inputTokens);
    const [fresh] = await run('plain', [systems[1], systems[1]]);
    expect(edited!.text).toBe(fresh!.text);
  });
});
