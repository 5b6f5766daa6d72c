// Where a worker's agent workflow code comes from. Compiled (dist/, the package), it is the bundle that
// `npm run build` wrote ahead of time to build/workflow-bundle.js; from TypeScript sources (tsx, vitest)
// it is bundled once per process and shared by every worker, so a source edit is never hidden behind a
// stale file and no worker start pays for webpack again.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

import { bundleWorkflowCode, type Logger, type WorkflowBundleOption } from '@temporalio/worker';

import { failureConverterPath } from '../security/data-converter';

/** The package-relative path of the bundle built ahead of time. */
export const PREBUILT_BUNDLE = join('build', 'workflow-bundle.js');

let inProcess: Promise<{ code: string }> | undefined;

/**
 * `logger`: where webpack's report goes (a worker passes its runtime's, so it takes the worker's log format).
 * @experimental Where a prebuilt bundle is looked for may change.
 */
export async function agentWorkflowBundle(logger?: Logger): Promise<WorkflowBundleOption> {
  const prebuilt = prebuiltBundlePath();
  if (prebuilt) return { codePath: prebuilt };
  inProcess ??= buildAgentWorkflowBundle(logger);
  return inProcess;
}

/**
 * The agent workflow with kvfabric's failure converter, which a bundle must carry (the worker cannot add it later).
 * @experimental
 */
export async function buildAgentWorkflowBundle(logger?: Logger): Promise<{ code: string }> {
  const { code } = await bundleWorkflowCode({
    workflowsPath: workflowsPath(),
    failureConverterPath: failureConverterPath(),
    ...(logger ? { logger } : {}),
  });
  return { code };
}

/** Writes the bundle for the compiled package (scripts/build-workflow-bundle.ts). */
export async function writeAgentWorkflowBundle(packageRoot: string): Promise<string> {
  const path = join(packageRoot, PREBUILT_BUNDLE);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, (await buildAgentWorkflowBundle()).code);
  return path;
}

/** The workflow bundle's entry, from TypeScript sources (tsx, vitest) or compiled JavaScript (dist). */
export function workflowsPath(): string {
  return workflowModule('workflows', 'index');
}

/** The workflow interceptor that gives kvfabric's AI SDK model calls their heartbeat timeout (src/ai-sdk/model-call-timeouts.ts). */
export function modelCallTimeoutsPath(): string {
  return workflowModule('ai-sdk', 'model-call-timeouts');
}

function workflowModule(folder: string, name: string): string {
  const base = join(__dirname, '..', folder, name);
  const found = ['.ts', '.js'].map((ext) => base + ext).find((path) => existsSync(path));
  if (!found) throw new Error(`workflow sources not found at ${base}.ts or .js`);
  return found;
}

/** Only a compiled process uses the prebuilt file: dist/src/plugin/ is three levels below the package root. */
function prebuiltBundlePath(): string | undefined {
  if (!__filename.endsWith('.js')) return undefined;
  const path = join(__dirname, '..', '..', '..', PREBUILT_BUNDLE);
  return existsSync(path) ? path : undefined;
}
