// The Temporal Web UI in a real browser (headless Chromium driven by playwright-core): an agent runs a
// short lifecycle (turns until Temporal suggests continue-as-new, the idle and warm timers, a resume, a
// release) on a dev server whose UI decodes payloads through the codec server; the test opens the
// workflow's pages and checks the history shows the lifecycle with decoded payloads, then serves the
// same history again without the codec endpoint and checks the UI shows only ciphertext. Screenshots go
// to build/ui/. Without Debian's chromium it fails, saying how to install it (.ci/run installs it): a
// test that skips for want of something installable hides what it exists to check.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { AgentClient } from '../../src/client/agent-client';
import { freePort, startDevServer, type DevServer } from '../../src/dev-server/dev-server';
import { CapabilityIssuer } from '../../src/security/capability-issuer';
import { startCodecServer, type CodecServer } from '../../src/security/codec-server';
import { ENCRYPTED_ENCODING, EncryptionCodec, CodecKeyRing } from '../../src/security/payload-codec';
import { createGpuWorker, type GpuWorker } from '../../src/worker/gpu-worker';
import { agentWorkflowId } from '../../src/identity/agent-identity';
import { TEST_CODEC_KEYS, TEST_SIGNING_KEYS } from '../security/test-keys';
import { TEST_AGENT_CONFIG, TEST_DATA_CONVERTER, TINY, eventually, installRuntime, testWorkerConfig } from '../temporal/harness';

const CHROMIUM = process.env.KVFABRIC_CHROMIUM ?? '/usr/bin/chromium';
const SCREENSHOTS = resolve(__dirname, '..', '..', 'build', 'ui');
const AGENT = 'ui-agent';
const TASK_QUEUE = 'kvfabric-ui-test';

interface Runs {
  first: string;
  last: string;
}

let dir: string;
let dbFile: string;
let uiPort: number;
let codecServer: CodecServer;
let server: DevServer | undefined;
let browser: Browser | undefined;
let runs: Runs;

/** The dev server on the same SQLite file and UI port, with or without the UI's codec endpoint. */
async function serve(codecEndpoint?: string): Promise<DevServer> {
  return startDevServer({
    dbFile,
    ui: { port: uiPort, ...(codecEndpoint ? { codecEndpoint } : {}) },
    dynamicConfig: { 'limit.historyCount.suggestContinueAsNew': 40 },
  });
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(`${CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium) or set KVFABRIC_CHROMIUM`);
  await installRuntime();
  dir = mkdtempSync(join(tmpdir(), 'kvfabric-ui-'));
  dbFile = join(dir, 'temporal.db');
  uiPort = await freePort();
  const token = randomBytes(24).toString('base64url');
  codecServer = await startCodecServer({
    codec: new EncryptionCodec(new CodecKeyRing(TEST_CODEC_KEYS)),
    token,
    uiOrigin: `http://localhost:${uiPort}`,
  });
  server = await serve(`${codecServer.url}/${token}`);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  runs = await runAgent(server);
}, 90_000);

afterAll(async () => {
  await browser?.close();
  await server?.stop();
  await codecServer?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Turns until continue-as-new, then the idle and warm timers, a resume from disk and the release. */
async function runAgent(dev: DevServer): Promise<Runs> {
  const workerConnection = await NativeConnection.connect({ address: dev.address });
  const worker: GpuWorker = await createGpuWorker({
    connection: workerConnection,
    config: testWorkerConfig({
      address: dev.address,
      taskQueue: TASK_QUEUE,
      tierDir: join(dir, 'tiers'),
      workerId: 'ui-worker',
      pool: { deviceBlocks: 64, hostBlocks: 64 },
      maxConcurrentActivities: 4,
    }),
  });
  const running = worker.run();
  const connection = await Connection.connect({ address: dev.address });
  const client = new Client({ connection, dataConverter: TEST_DATA_CONVERTER });
  const agents = new AgentClient(client, TASK_QUEUE, { issuer: new CapabilityIssuer(TEST_SIGNING_KEYS) });
  try {
    const config = { ...TEST_AGENT_CONFIG, timers: { idleToWarmMs: 500, warmToColdMs: 500 } };
    const agent = await agents.start({ agentId: AGENT, tenant: 'acme', model: TINY, config });
    for (let i = 0; i < 5; i++) await agent.turn(8);
    await eventually(async () => ((await agent.status()).phase === 'cold' ? true : undefined), 20_000, 'cold after the timers');
    await agent.resume();
    const status = await agent.status();
    expect(status.run).toBeGreaterThan(1);
    await agent.release();
    // Visibility is eventually consistent: the completed run is listed a moment after the release.
    return eventually(
      async () => {
        const found = [];
        for await (const run of client.workflow.list({ query: `WorkflowId = '${agentWorkflowId(AGENT)}'` })) found.push(run);
        const first = found.find((run) => run.status.name === 'CONTINUED_AS_NEW');
        const last = found.find((run) => run.status.name === 'COMPLETED');
        return first && last ? { first: first.runId, last: last.runId } : undefined;
      },
      20_000,
      'the first and the last run in the visibility store',
    );
  } finally {
    worker.shutdown();
    await running;
    await connection.close();
    await workerConnection.close();
  }
}

/** Opens a run's history page and waits until the UI rendered its events; returns the page's text. */
async function openHistory(page: Page, runId: string, waitFor: (text: string) => boolean, what: string): Promise<string> {
  await page.goto(`http://localhost:${uiPort}/namespaces/default/workflows/${agentWorkflowId(AGENT)}/${runId}/history`);
  let text = '';
  // The UI renders the history after its own queries: on a loaded machine (the whole suite at once) that
  // took over 25 s once.
  const deadline = Date.now() + 60_000;
  for (;;) {
    text = await page.locator('body').innerText();
    if (waitFor(text)) return text;
    if (Date.now() > deadline) throw new Error(`the UI never showed ${what}; the page said:\n${text}`);
    await page.waitForTimeout(300);
  }
}

/** Without the codec the UI prints a sealed payload's bytes (encoding binary/encrypted) as one base64 string. */
const CIPHERTEXT = /"[A-Za-z0-9+/]{200,}={0,2}"/;
const lifecycle = (text: string) => /Update/i.test(text) && /Activity ?Task ?Scheduled/i.test(text) && /Timer ?Started/i.test(text);

describe('the Temporal Web UI in headless Chromium', () => {
  it('shows the lifecycle with payloads decoded by the codec server, then only ciphertext without it', async () => {
    mkdirSync(SCREENSHOTS, { recursive: true });
    const page = await browser!.newPage({ viewport: { width: 1600, height: 2400 } });

    // With the codec endpoint: events of the lifecycle, payloads as JSON only the codec can produce.
    const decoded = (text: string) => lifecycle(text) && text.includes(`"agentId": "${AGENT}"`);
    const first = await openHistory(
      page,
      runs.first,
      (text) => decoded(text) && /Continued ?As ?New/i.test(text) && /Timer ?Fired/i.test(text),
      'the first run decoded',
    );
    expect(first).toMatch(/Continued ?As ?New/i);
    expect(first).not.toContain(ENCRYPTED_ENCODING);
    await page.screenshot({ path: join(SCREENSHOTS, 'history-first-run-decoded.png'), fullPage: true });
    const last = await openHistory(
      page,
      runs.last,
      (text) => decoded(text) && /Workflow ?Execution ?Completed/i.test(text),
      'the last run decoded',
    );
    expect(last).toMatch(/Workflow ?Execution ?Completed/i);
    await page.screenshot({ path: join(SCREENSHOTS, 'history-decoded.png'), fullPage: true });
    await page.close();

    // The same history served without the codec endpoint: the events, but ciphertext.
    await server!.stop();
    server = await serve();
    const raw = await browser!.newPage({ viewport: { width: 1600, height: 2400 } });
    const cipher = await openHistory(raw, runs.last, (text) => lifecycle(text) && CIPHERTEXT.test(text), 'ciphertext');
    expect(cipher).not.toContain('"agentId"');
    await raw.screenshot({ path: join(SCREENSHOTS, 'history-ciphertext.png'), fullPage: true });
    await raw.close();
  }, 240_000);
});
