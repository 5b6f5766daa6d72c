// The one way the native addon is loaded, in any thread: once per thread, ABI-checked, with FabricError
// handed over so native failures are the same typed errors as TypeScript ones. What it exports is
// declared in addon-types.ts. KVFABRIC_ADDON points at another build of it (the ASan build, the build
// beside the stand-in CUDA driver); the CUDA backend itself is chosen per pool (KVFABRIC_BACKEND).
import fs from 'node:fs';
import path from 'node:path';

import type { NativeAddon } from './addon-types';
import { FabricError } from './errors';

const EXPECTED_ABI = 4;
let binding: NativeAddon | undefined;

function packageRoot(): string {
  for (let dir = __dirname; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'native', 'CMakeLists.txt'))) return dir;
    if (path.dirname(dir) === dir) throw new FabricError('UNAVAILABLE', 'cannot find the kvfabric package root');
  }
}

/** The addon's file: KVFABRIC_ADDON, else the package's own build (scripts/build-native.js). */
export function addonPath(): string {
  return process.env.KVFABRIC_ADDON ?? path.join(packageRoot(), 'build', 'native', 'kvfabric.node');
}

/** The addon, loaded on first use in this thread (a worker thread loads its own instance); UNAVAILABLE if it cannot be. */
export function loadNativeBinding(): NativeAddon {
  if (binding) return binding;
  const file = addonPath();
  let loaded: NativeAddon;
  try {
    loaded = require(file) as NativeAddon;
  } catch (err) {
    throw new FabricError(
      'UNAVAILABLE',
      `the native addon could not be loaded from ${file} (${(err as Error).message}); build it with npm run build:native`,
    );
  }
  if (loaded.abiVersion !== EXPECTED_ABI) {
    throw new FabricError('UNAVAILABLE', `addon at ${file} is ABI ${loaded.abiVersion}, expected ${EXPECTED_ABI}: rebuild it`);
  }
  loaded.registerErrorClass(FabricError);
  binding = loaded;
  return loaded;
}
