// The worker's log line for a payload its codec refused: names the key id (escaped) and the keys the
// worker holds, once a minute per reason (issue 39: the worker logged only `Encoded failure`).
import type { Logger } from '@temporalio/common';
import { afterEach, describe, expect, it, vi } from 'vitest';

import { FabricError } from '../../src/fabric/errors';
import { refusalLog } from '../../src/plugin/refusal-log';

function capture(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const warn = (message: string) => void lines.push(message);
  const none = () => undefined;
  return { logger: { log: none, trace: none, debug: none, info: none, warn, error: none }, lines };
}

afterEach(() => vi.useRealTimers());

describe('refusalLog', () => {
  it('names the refused key id and the keys this worker holds', () => {
    const { logger, lines } = capture();
    refusalLog(logger, ['k1', 'k2'])(
      new FabricError('PERMISSION_DENIED', "payload sealed with key 'other', which this process does not hold"),
    );
    expect(lines).toEqual([
      "kvfabric refused a payload (PERMISSION_DENIED): payload sealed with key 'other', which this process does not hold; " +
        "this worker holds payload codec keys 'k1', 'k2': clients and workers need the same payload codec keys (KVFABRIC_CODEC_KEYS or KVFABRIC_CODEC_KEYS_FILE)",
    ]);
  });

  it('logs one reason once a minute, and escapes what a header could smuggle in', () => {
    vi.useFakeTimers();
    const { logger, lines } = capture();
    const log = refusalLog(logger, ['k1']);
    const refusal = new FabricError('PERMISSION_DENIED', "payload sealed with key 'x', which this process does not hold");
    log(refusal);
    log(refusal);
    log(new FabricError('INTEGRITY', "sealed payload (key 'y') failed authentication\n[forged] line"));
    expect(lines).toHaveLength(2);
    expect(lines[1]).toContain('failed authentication\\x0a[forged] line');
    vi.advanceTimersByTime(60_000);
    log(refusal);
    expect(lines).toHaveLength(3);
  });
});
