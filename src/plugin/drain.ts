// Graceful shutdown's last step: once the worker takes no more calls, every context it still holds in
// memory is written to the cold tier (with its manifest) and dropped from device and host memory. Their
// agents' workflows are then told that this worker left (handover.ts) and adopt their contexts from disk on
// another worker at their next call, losing nothing.
import type { AgentMemory } from '../agent-memory/agent-memory';

/**
 * What a drain wrote to the cold tier.
 * @experimental
 */
export interface DrainReport {
  contexts: number;
  bytes: number;
  /** The contexts written, by id. */
  written: string[];
  /** Contexts that could not be written (their last durable copy, if any, is what survives). */
  failed: string[];
}

export async function drainToDisk(memory: AgentMemory): Promise<DrainReport> {
  const report: DrainReport = { contexts: 0, bytes: 0, written: [], failed: [] };
  for (const contextId of memory.heldContextIds()) {
    try {
      report.bytes += await memory.drainContext(contextId);
      report.contexts++;
      report.written.push(contextId);
    } catch {
      report.failed.push(contextId);
    }
  }
  return report;
}
