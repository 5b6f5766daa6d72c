// Opening a connection to Temporal, with a failure that says where it tried: the SDKs' own messages
// ("Failed to connect before the deadline", a tonic transport error) name neither the address nor the
// namespace, and an operator with a profile, environment variables and flags needs both to see which won.
import { FabricError } from '../fabric/errors';
import type { TemporalSettings } from './temporal-settings';

/** Runs `connect`; its failure becomes UNAVAILABLE `cannot reach Temporal at <address> (namespace <ns>): <why>`. */
export async function reachTemporal<T>(settings: TemporalSettings, connect: () => Promise<T>): Promise<T> {
  try {
    return await connect();
  } catch (err) {
    throw new FabricError(
      'UNAVAILABLE',
      `cannot reach Temporal at ${settings.address} (namespace ${settings.namespace}): ${reasonOf(err)}`,
    );
  }
}

function reasonOf(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  // The native connection's message is a Rust debug print; its OS error text is what a person can act on.
  const osMessage = /message: "([^"]+)"/.exec(message)?.[1];
  return (osMessage ?? message).split('\n')[0]!;
}
