// Opens a ticket and plays the customer: the question, then, once the ticket waits (its agent parked on
// disk), the follow-up; prints what the agent answered and how it came back. This process holds the codec
// keys only (KVFABRIC_CODEC_KEYS_FILE): it never sees a capability. In your project the import is
// 'kvfabric/client'; TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE or a temporal.toml profile say where Temporal is.
import { setTimeout as sleep } from 'node:timers/promises';

import { Client, Connection } from '@temporalio/client';

import { clientSecurityFromEnv, connectionOptionsOf, temporalSettings, type ClientSecurity, type TemporalSettings } from '../../src/client';
import { KvFabricClientPlugin } from '../../src/plugin';
import { customerWrote, supportTicket, ticketStage, TICKET_QUEUE, type Ticket, type TicketTranscript } from './workflows';

export async function openTicket(
  settings: TemporalSettings,
  security: ClientSecurity,
  ticket: Ticket,
  followUp: string,
): Promise<TicketTranscript> {
  const connection = await Connection.connect(connectionOptionsOf(settings));
  try {
    const client = new Client({ connection, namespace: settings.namespace, plugins: [new KvFabricClientPlugin(security)] });
    const handle = await client.workflow.start(supportTicket, { taskQueue: TICKET_QUEUE, workflowId: `ticket-${ticket.id}`, args: [ticket] });
    while ((await handle.query(ticketStage)) !== 'waiting for the customer') await sleep(250);
    await handle.signal(customerWrote, followUp);
    return await handle.result();
  } finally {
    await connection.close();
  }
}

/** The example's customer: a question, then a follow-up once the ticket waits for them. */
export const CUSTOMER = {
  question: 'My order 4417 arrived broken. What should I do?',
  followUp: 'Which order number did I give you?',
};

export function printTranscript(ticketId: string, transcript: TicketTranscript): void {
  console.log(`customer: ${CUSTOMER.question}`);
  console.log(`agent: ${transcript.answer}`);
  console.log(`(the agent waited on ${transcript.parkedOn}; back from ${transcript.resumedFrom} in ${transcript.resumeMs.toFixed(1)} ms)`);
  console.log(`customer: ${transcript.followUp}`);
  console.log(`agent: ${transcript.followUpAnswer}`);
  console.log(`ticket ${ticketId} closed, agent ${transcript.agentId} released`);
}

async function main(): Promise<void> {
  const ticket = { id: process.argv[2] ?? String(Date.now()), tenant: 'acme', question: CUSTOMER.question };
  printTranscript(ticket.id, await openTicket(temporalSettings({}), clientSecurityFromEnv(), ticket, CUSTOMER.followUp));
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
