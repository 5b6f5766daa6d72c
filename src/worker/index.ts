// Public entry of kvfabric's own worker: the GPU worker (a thin user of the worker plugin) and its
// configuration from flags and environment.
export { createGpuWorker, type GpuWorker, type GpuWorkerOptions } from './gpu-worker';
export { parseWorkerConfig, WORKER_USAGE, type WorkerConfig } from './config';
export { WorkerConfigError } from './config-error';
