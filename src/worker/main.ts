#!/usr/bin/env node
// The GPU worker process: `kvfabric-worker --tier-dir /shared/kv ...` (see WORKER_USAGE). SIGINT or
// SIGTERM shuts it down gracefully: running calls finish, held contexts drain to the cold tier.
import { Runtime, makeTelemetryFilterString } from '@temporalio/worker';

import { WORKER_USAGE, parseWorkerConfig } from './config';
import { createGpuWorker } from './gpu-worker';

const SHUTDOWN_SIGNALS = ['SIGINT', 'SIGTERM'] as const;

async function main(): Promise<void> {
  if (process.argv.includes('--help')) {
    console.log(WORKER_USAGE);
    return;
  }
  const config = parseWorkerConfig(process.argv.slice(2));
  Runtime.install({
    telemetryOptions: {
      logging: { filter: makeTelemetryFilterString({ core: 'WARN' }), forward: {} },
      ...(config.metricsAddress ? { metrics: { prometheus: { bindAddress: config.metricsAddress } } } : {}),
    },
  });
  const worker = await createGpuWorker({ config });
  // The runtime shuts the workers down on SIGINT/SIGTERM; run() then drains and resolves. It stops
  // listening at the first signal, and signal-exit (in node-llama-cpp's dependencies) re-raises a signal
  // nobody else listens to: staying subscribed until the drain is done keeps this process alive for it.
  const stayForDrain = (): void => undefined;
  for (const signal of SHUTDOWN_SIGNALS) process.on(signal, stayForDrain);
  const report = await worker.run();
  for (const signal of SHUTDOWN_SIGNALS) process.off(signal, stayForDrain);
  if (report.failed.length > 0) process.exitCode = 1;
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
