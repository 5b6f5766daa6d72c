// The ticket example in one command (`npm run example:ticket`): the embedded Temporal dev server (history
// in .kvfabric/ticket-example/temporal.db), one kvfabric GPU worker with the default model on the CPU (the
// agents' queue), the ticket worker (worker.ts: the tickets' queue, the signing keys) and one ticket
// (client.ts), printed as the customer sees it. Keys are made for this run only; a real deployment has its
// own (kvfabric keygen, docs/operations.md), and the three run as processes of their own
// (docs/agents.md#your-own-workflow-with-an-agent).
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

import { DefaultLogger, Runtime } from '@temporalio/worker';

import { startDevServer } from '../../src/dev-server/dev-server';
import { CapabilityIssuer } from '../../src/security/capability-issuer';
import { ed25519PublicOf, keyListText } from '../../src/security/key-list';
import { CodecKeyRing } from '../../src/security/payload-codec';
import { createGpuWorker, parseWorkerConfig } from '../../src/worker';
import { CUSTOMER, openTicket, printTranscript } from './client';
import { createTicketWorker } from './worker';
import { AGENT_QUEUE } from './workflows';

const DIR = join('.kvfabric', 'ticket-example');

async function main(): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  rmSync(DIR, { recursive: true, force: true }); // a fresh history each run
  mkdirSync(DIR, { recursive: true });
  const signing = { id: 'example-sign', key: randomBytes(32) };
  const codecKeys = [{ id: 'example-codec', key: randomBytes(32) }];
  const security = { codec: new CodecKeyRing(codecKeys), issuer: new CapabilityIssuer([signing]) };

  console.log('starting the Temporal dev server ...');
  const server = await startDevServer({ dbFile: join(DIR, 'temporal.db') });
  try {
    console.log('loading the model into the GPU worker ...');
    const config = parseWorkerConfig(
      ['--address', server.address, '--task-queue', AGENT_QUEUE, '--worker-id', 'example', '--tier-dir', join(DIR, 'tiers')],
      {
        ...process.env,
        KVFABRIC_KEYS: `example=${randomBytes(32).toString('base64')}`,
        KVFABRIC_TRUSTED_KEYS: keyListText([{ id: signing.id, key: ed25519PublicOf(signing.key) }]),
        KVFABRIC_CODEC_KEYS: keyListText(codecKeys),
      },
    );
    const gpu = await createGpuWorker({ config });
    const gpuRunning = gpu.run();
    const settings = { address: server.address, namespace: 'default' };
    const tickets = await createTicketWorker(settings, security);
    const ticketsRunning = tickets.worker.run();
    try {
      console.log('opening ticket 4417 ...');
      const ticket = { id: '4417', tenant: 'acme', question: CUSTOMER.question };
      printTranscript(ticket.id, await openTicket(settings, security, ticket, CUSTOMER.followUp));
    } finally {
      tickets.worker.shutdown();
      await ticketsRunning;
      await tickets.close();
      gpu.shutdown();
      await gpuRunning;
    }
  } finally {
    await server.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
