// How large a JSON Schema kvfabric takes from a caller: a tool's input schema, or the schema a reply is held
// to, which llama.cpp compiles into a grammar. Converting a schema into a grammar runs on the event loop
// and grows with the schema (an enum of 20,000 entries also costs seconds of CPU on every token sampled),
// and a schema nested thousands deep overflows the stack of whatever walks it recursively
// (JSON.stringify included). So a schema is measured here first, without recursion and stopping at the
// first limit it passes: the work is bounded whatever was sent. At these limits a schema compiles in a few
// milliseconds (docs/ai-sdk.md, "Limits").
import { FabricError } from '../fabric/errors';

export interface JsonSchemaLimits {
  /** The schema as JSON, in UTF-8 bytes. */
  maxBytes: number;
  /** Entries of every `enum` in the schema, together: each is an alternative the grammar tries on every token. */
  maxEnumEntries: number;
  /** Nesting of objects and arrays. */
  maxDepth: number;
}

export const JSON_SCHEMA_LIMITS: Readonly<JsonSchemaLimits> = Object.freeze({ maxBytes: 8192, maxEnumEntries: 256, maxDepth: 32 });

/**
 * INVALID_ARGUMENT, naming `what`, when `schema` is not plain JSON or passes a limit. The size counted is
 * the schema's compact JSON (strings unescaped), so the walk stops within `maxBytes` of input.
 */
export function checkJsonSchemaBounds(schema: unknown, what: string, limits: JsonSchemaLimits = JSON_SCHEMA_LIMITS): void {
  const refuse = (why: string) => {
    throw new FabricError('INVALID_ARGUMENT', `${what} ${why}`);
  };
  let bytes = 0;
  let enumEntries = 0;
  const pending: Array<{ value: unknown; depth: number }> = [{ value: schema, depth: 0 }];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const { value, depth } = next;
    if (value === null || value === undefined || typeof value === 'boolean' || typeof value === 'number') {
      bytes += String(value ?? null).length;
      continue;
    }
    if (typeof value === 'string') {
      bytes += Buffer.byteLength(value) + 2;
      continue;
    }
    if (typeof value !== 'object') refuse(`holds a ${typeof value}, which is not JSON`);
    if (depth >= limits.maxDepth) refuse(`is nested more than ${limits.maxDepth} deep`);
    bytes += 2;
    // Each entry is counted as it is queued (a comma at least), so a huge array or object stops the walk early.
    const entries: Iterable<[string | undefined, unknown]> = Array.isArray(value)
      ? value.map((item): [undefined, unknown] => [undefined, item])
      : Object.entries(value as Record<string, unknown>);
    for (const [key, item] of entries) {
      if (item === undefined && key !== undefined) continue; // JSON leaves it out
      if (key === 'enum' && Array.isArray(item)) {
        enumEntries += item.length;
        if (enumEntries > limits.maxEnumEntries) refuse(`holds ${enumEntries} enum entries or more; at most ${limits.maxEnumEntries}`);
      }
      bytes += (key === undefined ? 0 : Buffer.byteLength(key) + 3) + 1;
      if (bytes > limits.maxBytes) refuse(`is more than ${limits.maxBytes} bytes of JSON`);
      pending.push({ value: item, depth: depth + 1 });
    }
  }
  if (bytes > limits.maxBytes) refuse(`is more than ${limits.maxBytes} bytes of JSON`);
}
