// An agent written with the AI SDK on a real dev server, its model calls through @temporalio/ai-sdk's
// invokeModel activity on a worker that also runs kvfabric, with the real model: a 4-step tool loop
// evaluates only what each step adds, where the same loop through a provider that keeps no KV evaluates
// the whole conversation every step, and the two loops reply the same (greedy). Each workflow run has KV
// of its own: another run with the same prompt reuses nothing of it. Once a run has ended, the worker's
// housekeeping frees its KV, in memory and in the cold tier. A planned wake-up (sleepThenWakeModelMemory)
// brings an idle run's KV back from disk into the engine before its next call, which is sent to the worker
// that prefetched and replies as it would without; an unused one lets the KV fall back from the planned instant.
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
import { MODEL_MEMORY_UNMEASURED_LEAD_MS } from '../../src/workflows/model-memory';
import type {
  LoopStep,
  cancelledCall,
  divergingAgent,
  idleAgent,
  pausedAgent,
  researchAgent,
  researchAndRelease,
  researchThenWait,
  unusedWake,
} from './research-workflows';

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
    // The first run stays open while the second starts: its prefix goes with its KV here (prefixIdleMs 0),
    // which the sweep frees within a second of the run's end.
    const open = await cluster.client.workflow.start<typeof researchThenWait>('researchThenWait', {
      taskQueue: cluster.taskQueue,
      workflowId: `research-${randomBytes(4).toString('hex')}`,
      args: [{ modelId: 'kvfabric', question: QUESTION, steps: 2 }],
      workflowExecutionTimeout: '10 minutes',
    });
    const first = await eventually(() => open.query<LoopStep[] | undefined>('researchSteps'), 120_000, 'the first run’s answer');
    const second = await research('kvfabric', 2);
    await open.signal('finish');
    expect(await open.result()).toEqual(first);
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

  it('runs its own lease beside the runs’ workflows, though it leaves agent workflows to others', async () => {
    // The plugin starts the worker's lease on this queue, where no agent workflows run: a lease no worker
    // could run would fail its workflow task for ever, one ERROR line every few seconds.
    const query = `WorkflowType = 'workerLeaseWorkflow' AND TaskQueue = '${cluster.taskQueue}'`;
    const lease = await eventually(
      async () => {
        for await (const execution of cluster.client.workflow.list({ query })) return execution;
        return undefined;
      },
      20_000,
      'the worker’s lease to be listed',
    );
    await eventually(
      async () => {
        const { events } = await cluster.client.workflow.getHandle(lease.workflowId, lease.runId).fetchHistory();
        return events?.some((event) => event.activityTaskScheduledEventAttributes) ? true : undefined;
      },
      20_000,
      'the lease’s workflow to schedule its heartbeat',
    );
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
    // The first call starts cold; with prefix sharing on, it may adopt a prefix an earlier run of this tenant published.
    expect(['empty', 'stored']).toContain(first!.resumedFrom);
    expect(first!.reusedTokens ?? 0).toBeLessThan(first!.inputTokens!);
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

/** The tiers a run's KV is seen in, in order, each with when it was first seen there (repeats dropped). */
function watchTiers(id: string): { seen: Array<{ tier: string; at: number }>; stop(): void } {
  const seen: Array<{ tier: string; at: number }> = [];
  const timer = setInterval(() => {
    if (!kvfabric.memory.holds(id)) return;
    const { tier } = kvfabric.memory.snapshot(id);
    if (seen.at(-1)?.tier !== tier) seen.push({ tier, at: Date.now() });
  }, 50);
  return { seen, stop: () => clearInterval(timer) };
}

/** Whether `tiers` passes through `expected` in that order (other tiers between allowed). */
function passesThrough(tiers: readonly string[], expected: readonly string[]): boolean {
  let next = 0;
  for (const tier of tiers) if (tier === expected[next]) next++;
  return next === expected.length;
}

describe('a planned wake-up of an AI SDK run’s KV', () => {
  /** Long enough for the KV to reach disk (1.5 s + 1 s idle) well before the prefetch, 10 s ahead of the end. */
  const PAUSE_MS = MODEL_MEMORY_UNMEASURED_LEAD_MS + 10_000;

  it('brings it back from disk into the engine before the next call, which runs where it is and replies as without', async () => {
    const start = (wake: boolean) =>
      cluster.client.workflow.start<typeof pausedAgent>('pausedAgent', {
        taskQueue: cluster.taskQueue,
        workflowId: `paused-${wake ? 'waking' : 'sleeping'}-${randomBytes(4).toString('hex')}`,
        args: ['kvfabric', QUESTION, PAUSE_MS, wake],
      });
    const [waking, sleeping] = await Promise.all([start(true), start(false)]);
    const id = modelCallContextId({
      namespace: 'default',
      workflowId: waking.workflowId,
      runId: waking.firstExecutionRunId,
      tenant: 'default',
    });
    const tiers = watchTiers(id);
    const [woken, slept] = await Promise.all([waking.result(), sleeping.result()]).finally(tiers.stop);

    // Down to disk under the idle timers, then up to the device by the prefetch, before the call.
    expect(
      passesThrough(
        tiers.seen.map((seen) => seen.tier),
        ['device', 'host', 'disk', 'device'],
      ),
    ).toBe(true);
    expect(woken.woke).toMatchObject({ outcome: 'resumed', worker: kvfabric.holder });
    expect(woken.woke!.bytes).toBeGreaterThan(0);
    // The next call continued the KV hot in the engine; without the wake-up it loaded the stored pages.
    expect(woken.steps[1]!.resumedFrom).toBe('hot');
    expect(slept.steps[1]!.resumedFrom).toBe('stored');
    expect(slept.woke).toBeUndefined();
    // The same conversation, continued the same: the same reply, from the same prompt tokens.
    expect(woken.steps.map((step) => [step.text, step.inputTokens, step.reusedTokens])).toEqual(
      slept.steps.map((step) => [step.text, step.inputTokens, step.reusedTokens]),
    );
    // The call after the prefetch was sent to the prefetching worker's own queue, once.
    const queues = ((await waking.fetchHistory()).events ?? []).flatMap((event) => {
      const scheduled = event.activityTaskScheduledEventAttributes;
      return scheduled?.activityType?.name === 'invokeModel' ? [scheduled.taskQueue?.name] : [];
    });
    expect(queues).toEqual([cluster.taskQueue, kvfabric.holder]);
  }, 120_000);

  it('lets a prefetched KV nobody uses fall back under the idle timers, counted from the planned instant', async () => {
    const handle = await cluster.client.workflow.start<typeof unusedWake>('unusedWake', {
      taskQueue: cluster.taskQueue,
      workflowId: `unused-wake-${randomBytes(4).toString('hex')}`,
      args: ['kvfabric', QUESTION, PAUSE_MS],
    });
    const id = modelCallContextId({
      namespace: 'default',
      workflowId: handle.workflowId,
      runId: handle.firstExecutionRunId,
      tenant: 'default',
    });
    const tiers = watchTiers(id);
    try {
      await eventually(
        async () =>
          passesThrough(
            tiers.seen.map((seen) => seen.tier),
            ['disk', 'device', 'host', 'disk'],
          )
            ? true
            : undefined,
        PAUSE_MS + 30_000,
        'the KV to reach disk, come back, and fall back to disk',
      );
    } finally {
      tiers.stop();
    }
    await handle.signal('followUp', 'no more');
    expect(await handle.result()).toMatchObject({ outcome: 'resumed' });
    // Prefetched the lead time before the planned instant; the idle timer ran from that instant, not from the prefetch.
    const back = tiers.seen.findIndex((seen, i) => seen.tier === 'device' && tiers.seen[i - 1]?.tier === 'disk');
    const down = tiers.seen.findIndex((seen, i) => i > back && seen.tier === 'host');
    expect(tiers.seen[down]!.at - tiers.seen[back]!.at).toBeGreaterThanOrEqual(MODEL_MEMORY_UNMEASURED_LEAD_MS - 2000);
  }, 120_000);
});
