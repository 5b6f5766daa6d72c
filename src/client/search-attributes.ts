// kvfabric's search attributes on a namespace: registered through the operator service (what `kvfabric
// setup` does; the dev server takes them as start-up flags instead), and registered on demand by a client
// whose call found them missing, so a first `AgentClient.start` on a fresh namespace works. Where the
// caller may not register them (Temporal Cloud without an admin's key, a namespace whose authorizer
// keeps AddSearchAttributes to admins), the failure says so and names the fix. Idempotent: attributes
// already there are left alone.
import type { ConnectionLike } from '@temporalio/client';
import { temporal } from '@temporalio/proto';

import { FabricError } from '../fabric/errors';
import { AGENT_SEARCH_ATTRIBUTES } from '../workflows/search-attributes';
import { messagesOf } from './error-chain';

/** What registration needs of a connection: the client's Connection and the worker's NativeConnection both have it. */
export type OperatorConnection = Pick<ConnectionLike, 'operatorService'>;

/** Where the namespace is, for the fix a failure names. */
export interface NamespaceAddress {
  namespace: string;
  address?: string;
  /** Temporal Cloud (an API key, or a *.tmprl.cloud address): the operator service there takes only an admin's key. */
  cloud?: boolean;
}

const TYPES: Record<string, temporal.api.enums.v1.IndexedValueType> = {
  Keyword: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
  Int: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_INT,
};

/** gRPC's status codes for a caller the server does not let do this. */
const GRPC_PERMISSION_DENIED = 7;
const GRPC_UNAUTHENTICATED = 16;

/** How long a retried call waits for a registration to be seen (the server caches a namespace's attributes). */
const VISIBLE_WITHIN_MS = 15_000;

/**
 * Registers the agents' search attributes in `namespace`; returns the names it added.
 * @experimental The attributes' set may grow.
 */
export async function registerSearchAttributes(connection: OperatorConnection, namespace: string): Promise<string[]> {
  const existing = await connection.operatorService.listSearchAttributes({ namespace });
  const known = new Set([...Object.keys(existing.customAttributes ?? {}), ...Object.keys(existing.systemAttributes ?? {})]);
  const missing = AGENT_SEARCH_ATTRIBUTES.filter(({ name }) => !known.has(name));
  if (missing.length === 0) return [];
  await connection.operatorService.addSearchAttributes({
    namespace,
    searchAttributes: Object.fromEntries(missing.map(({ name, type }) => [name, TYPES[type]!])),
  });
  return missing.map(({ name }) => name);
}

/**
 * The kvfabric attribute a server error says the namespace lacks: a start ("no mapping defined for search
 * attribute KvAgentId") or a list query ("invalid query: invalid search attribute: KvTenant").
 */
export function missingSearchAttribute(err: unknown): string | undefined {
  const message = messagesOf(err);
  for (const { name } of AGENT_SEARCH_ATTRIBUTES) {
    const named = new RegExp(`(no mapping defined for search attribute|invalid search attribute:) ${name}\\b`, 'i');
    if (named.test(message)) return name;
  }
  return undefined;
}

/**
 * Runs `call`; when it fails because the namespace lacks kvfabric's search attributes, registers them and
 * runs it again until the server sees them (it caches a namespace's attributes for a few seconds). A
 * caller that may not register them gets INVALID_STATE naming the missing attribute and the fix.
 */
export async function withSearchAttributes<T>(connection: OperatorConnection, where: NamespaceAddress, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    const missing = missingSearchAttribute(err);
    if (missing === undefined) throw err;
    try {
      await registerSearchAttributes(connection, where.namespace);
    } catch (refusal) {
      throw notRegistered(where, missing, refusal);
    }
  }
  const deadline = Date.now() + VISIBLE_WITHIN_MS;
  for (let waitMs = 100; ; waitMs = Math.min(waitMs * 2, 1000)) {
    try {
      return await call();
    } catch (err) {
      const missing = missingSearchAttribute(err);
      if (missing === undefined) throw err;
      if (Date.now() + waitMs > deadline) {
        throw new FabricError(
          'UNAVAILABLE',
          `registered kvfabric's search attributes on namespace ${where.namespace}, ` +
            `but the server still had no ${missing} after ${VISIBLE_WITHIN_MS / 1000} s: try again`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, waitMs));
    }
  }
}

/** The failure of a caller that may not register the attributes: what is missing, why, and who can fix it. */
export function notRegistered(where: NamespaceAddress, missing: string, refusal: unknown): FabricError {
  const code = (refusal as { code?: unknown } | null)?.code;
  const why =
    code === GRPC_PERMISSION_DENIED || code === GRPC_UNAUTHENTICATED ? 'this client may not register them' : `registering them failed`;
  const reason = (refusal instanceof Error ? refusal.message : String(refusal)).split('\n')[0];
  const attributes = AGENT_SEARCH_ATTRIBUTES.map(({ name, type }) => `${name}=${type}`).join(' ');
  const flags = `${where.address ? ` --address ${where.address}` : ''} --namespace ${where.namespace}`;
  const fix = where.cloud
    ? `a Temporal Cloud namespace admin adds them (${attributes}): ` +
      "in the Cloud UI (the namespace's search attributes), " +
      `or \`npx kvfabric setup${flags}\` with an admin's API key`
    : `run \`npx kvfabric setup${flags}\` ` +
      'as a user who may change the namespace ' +
      `(or \`temporal operator search-attribute create\` for each of ${attributes})`;
  return new FabricError(
    'INVALID_STATE',
    `namespace ${where.namespace} has no search attribute ${missing} ` +
      "(kvfabric's search attributes are not registered) " +
      `and ${why} (${reason}): ${fix}`,
  );
}
