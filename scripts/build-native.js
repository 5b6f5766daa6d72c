#!/usr/bin/env node
// Builds the native addon with CMake against the Node-API headers in node_modules (never downloads
// headers). Runs on `npm ci` through the package's install script.
//   --sanitize   ASan+UBSan build into build/native-asan
//   --test       also runs the C++ core test (built whenever native/test is there)
'use strict';
const { spawnSync } = require('node:child_process');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const sanitize = process.argv.includes('--sanitize');
const runTests = process.argv.includes('--test');
const buildDir = path.join(root, 'build', sanitize ? 'native-asan' : 'native');
// An installed package carries no native/test (package.json "files"): it builds the addon alone.
const withTests = require('node:fs').existsSync(path.join(root, 'native', 'test'));

function run(cmd, args) {
  const result = spawnSync(cmd, args, { stdio: 'inherit', cwd: root });
  if (result.error) {
    console.error(`kvfabric: cannot run ${cmd}: ${result.error.message} (install cmake and a C++17 compiler)`);
    process.exit(1);
  }
  if (result.status !== 0) process.exit(result.status ?? 1);
}

const hasNinja = spawnSync('ninja', ['--version'], { stdio: 'ignore' }).status === 0;
run('cmake', [
  '-S',
  path.join(root, 'native'),
  '-B',
  buildDir,
  ...(hasNinja ? ['-G', 'Ninja'] : []),
  `-DCMAKE_BUILD_TYPE=${sanitize ? 'RelWithDebInfo' : 'Release'}`,
  `-DKVFABRIC_SANITIZE=${sanitize ? 'ON' : 'OFF'}`,
  `-DKVFABRIC_TESTS=${withTests ? 'ON' : 'OFF'}`,
  `-DNODE_API_HEADERS_DIR=${require('node-api-headers').include_dir}`,
  `-DNODE_ADDON_API_DIR=${path.resolve(root, require('node-addon-api').include_dir.replace(/"/g, ''))}`,
]);
run('cmake', ['--build', buildDir, '--parallel']);
if (runTests) run(path.join(buildDir, 'kvfabric_core_test'), []);
