// The ticket worker: your workflows and activities (workflows.ts, activities.ts) on a queue of your own,
// with kvfabric's client plugin, whose codec seals what they carry and whose signing keys mint the agents'
// tokens in the activities. It holds no KV: the agents run on kvfabric's workers (kvfabric-worker, or the
// README's worker with the worker plugin), which hold public keys only. In your project the imports are
// 'kvfabric/client' and 'kvfabric/plugin'. It reads TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE (or a
// temporal.toml profile) and the keys: KVFABRIC_CODEC_KEYS_FILE and KVFABRIC_SIGNING_KEYS_FILE.
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';

import { clientSecurityFromEnv, connectionOptionsOf, temporalSettings, type ClientSecurity, type TemporalSettings } from '../../src/client';
import { KvFabricClientPlugin } from '../../src/plugin';
import { ticketActivities } from './activities';
import { AGENT_QUEUE, TICKET_QUEUE } from './workflows';

export interface TicketWorker {
  worker: Worker;
  /** Closes the connections, once the worker's run() has resolved. */
  close(): Promise<void>;
}

export async function createTicketWorker(settings: TemporalSettings, security: ClientSecurity): Promise<TicketWorker> {
  const kvfabric = new KvFabricClientPlugin(security);
  const clientConnection = await Connection.connect(connectionOptionsOf(settings));
  const agents = kvfabric.agents(new Client({ connection: clientConnection, namespace: settings.namespace, plugins: [kvfabric] }), AGENT_QUEUE);
  const connection = await NativeConnection.connect(connectionOptionsOf(settings));
  const worker = await Worker.create({
    connection,
    namespace: settings.namespace,
    taskQueue: TICKET_QUEUE,
    workflowsPath: require.resolve('./workflows'),
    activities: ticketActivities(agents),
    plugins: [kvfabric], // the codec, on this worker as on its client
  });
  return {
    worker,
    async close() {
      await clientConnection.close();
      await connection.close();
    },
  };
}

async function main(): Promise<void> {
  const ticketWorker = await createTicketWorker(temporalSettings({}), clientSecurityFromEnv());
  console.log(`ticket worker ready on task queue '${TICKET_QUEUE}'`);
  await ticketWorker.worker.run(); // until SIGINT/SIGTERM
  await ticketWorker.close();
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
