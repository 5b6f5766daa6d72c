// The engine's install stays lean and pinned (docs/engines.md, "Install"): node-llama-cpp an optional peer
// dependency of the package at exactly the version the engine reports, installed here (a dev dependency)
// with its linux-x64 CPU binary, and every other prebuilt-binary package parked on an os-darwin stand-in
// that npm never installs here (the CUDA ones alone are 539 MB).
import fs from 'node:fs';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

import { NODE_LLAMA_CPP_VERSION } from '../../src/engines/llama/node-llama-cpp';

const root = path.join(__dirname, '..', '..');
const readJson = (file: string) => JSON.parse(fs.readFileSync(path.join(root, file), 'utf8'));

describe('the engine install', () => {
  it('pins node-llama-cpp, an optional peer, and its linux-x64 binary to the version the engine reports', () => {
    const pkg = readJson('package.json');
    expect(pkg.peerDependencies['node-llama-cpp']).toBe(NODE_LLAMA_CPP_VERSION);
    expect(pkg.peerDependenciesMeta['node-llama-cpp']).toEqual({ optional: true });
    expect(pkg.dependencies['node-llama-cpp']).toBeUndefined(); // a client or a synthetic worker never installs it
    expect(pkg.devDependencies['node-llama-cpp']).toBe(NODE_LLAMA_CPP_VERSION);
    expect(pkg.devDependencies['@node-llama-cpp/linux-x64']).toBe(NODE_LLAMA_CPP_VERSION);
    expect(readJson('node_modules/node-llama-cpp/package.json').version).toBe(NODE_LLAMA_CPP_VERSION);
  });

  it('the lockfile installs no other prebuilt binary on Linux', () => {
    const lock = readJson('package-lock.json');
    const binaries = Object.entries(lock.packages as Record<string, { version: string; name?: string; os?: string[] }>).filter(([key]) =>
      key.startsWith('node_modules/@node-llama-cpp/'),
    );
    expect(binaries.length).toBeGreaterThan(1);
    for (const [key, entry] of binaries) {
      if (key === 'node_modules/@node-llama-cpp/linux-x64') expect(entry.version).toBe(NODE_LLAMA_CPP_VERSION);
      else expect({ key, name: entry.name, os: entry.os }).toEqual({ key, name: 'fsevents', os: ['darwin'] });
    }
    const installed = fs.readdirSync(path.join(root, 'node_modules', '@node-llama-cpp'));
    expect(installed).toEqual(['linux-x64']);
  });
});
