// An agent written with the AI SDK on a real dev server, its model calls through @temporalio/ai-sdk's
// invokeModel activity on a worker that also runs kvfabric, with the real model: a 4-step tool loop
// evaluates only what each step adds, where the same loop through a provider that keeps no KV evaluates
// the whole conversation every step, and the two loops reply the same (greedy). Each workflow run has KV
// of its own: another run with the same prompt reuses nothing of it.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';

import { AiSdkPlugin } from '@temporalio/ai-sdk';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { LlamaEngine } from '../../src/engines/llama/llama-engine';
import { KvFabricWorkerPlugin } from '../../src/plugin/worker-plugin';
import { plainModelCalls, providerOf } from '../support/plain-model-calls';
import { startCluster, type TestCluster } from '../temporal/harness';
import type { LoopStep, researchAgent } from './research-workflows';

const CONTEXT_LENGTH = 2048;
const QUESTION = 'What does kvfabric keep for AI agents?';

let cluster: TestCluster;
let plainEngine: LlamaEngine;
let connection: NativeConnection;
let worker: Worker;
let running: Promise<void>;

beforeAll(async () => {
  cluster = await startCluster();
  plainEngine = await LlamaEngine.open({ contextLength: CONTEXT_LENGTH, hotContexts: 1 });
  const config = cluster.workerConfig({
    engine: 'llama',
    model: undefined,
    contextLength: CONTEXT_LENGTH,
    deviceBlocks: 1024,
    hostBlocks: 1024,
  });
  const kvfabric = new KvFabricWorkerPlugin({ ...config, agentWorkflows: false });
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

function research(modelId: string, steps: number, system?: string): Promise<LoopStep[]> {
  const args: Parameters<typeof researchAgent> = system ? [modelId, QUESTION, steps, system] : [modelId, QUESTION, steps];
  return cluster.client.workflow.execute<typeof researchAgent>('researchAgent', {
    taskQueue: cluster.taskQueue,
    workflowId: `research-${randomBytes(4).toString('hex')}`,
    args,
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
    // The same tool calls and the same answer: the KV kvfabric continued is the KV a fresh evaluation makes.
    expect(kept.map((step) => [step.toolCalls, step.text])).toEqual(plain.map((step) => [step.toolCalls, step.text]));
    // Without KV kept, every step evaluates its whole prompt. (The prompts' lengths may differ by a few
    // tokens: kvfabric sends a reply back as the ids it was generated as, the plain loop tokenizes its text.)
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

  it('gives each workflow run KV of its own: a second run with the same prompt reuses none of the first', async () => {
    const first = await research('kvfabric', 2);
    const second = await research('kvfabric', 2);
    expect(first[0]!.reusedTokens).toBe(0);
    expect(second[0]!.reusedTokens).toBe(0);
    expect(second.map((step) => step.text)).toEqual(first.map((step) => step.text));
  });
});
