// The kvfabric client plugin: added to a Temporal Client (`new Client({ ..., plugins: [plugin] })`), it
// gives that client kvfabric's data converter, so the agents' payloads are sealed before they leave the
// process, and it exposes the capability issuer (control plane only) and an AgentClient over the client.
// Built on the SDK's SimplePlugin: only the data converter changes, merged with the user's own.
import type { Client } from '@temporalio/client';
import { SimplePlugin } from '@temporalio/plugin';

import { AgentClient } from '../client/agent-client';
import type { ClientSecurity } from '../client/client-security';
import type { CapabilityIssuer } from '../security/capability-issuer';
import { withKvFabricConverter } from './converter';

export class KvFabricClientPlugin extends SimplePlugin {
  constructor(private readonly security: ClientSecurity) {
    super({ name: 'kvfabric', dataConverter: (existing) => withKvFabricConverter(existing, security.codec) });
  }

  /** The signing side of capabilities; absent in processes that only act with capabilities they are given. */
  get issuer(): CapabilityIssuer | undefined {
    return this.security.issuer;
  }

  /** kvfabric's client API over a Client created with this plugin; `taskQueue` is kvfabric's shared queue. */
  agents(client: Client, taskQueue = 'kvfabric'): AgentClient {
    const { codec: _codec, ...signing } = this.security;
    return new AgentClient(client, taskQueue, signing);
  }
}
