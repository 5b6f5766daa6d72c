// Registers the agents' search attributes on a namespace of a real cluster (the dev server takes them as
// start-up flags instead). Idempotent: attributes already there are left alone.
import type { Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';

import { AGENT_SEARCH_ATTRIBUTES } from '../workflows/search-attributes';

const TYPES: Record<string, temporal.api.enums.v1.IndexedValueType> = {
  Keyword: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
  Int: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_INT,
};

/** Returns the names it added. */
export async function registerSearchAttributes(connection: Connection, namespace: string): Promise<string[]> {
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
