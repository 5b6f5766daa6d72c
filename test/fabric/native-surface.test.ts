// The addon exports exactly what src/fabric/addon-types.ts declares: every function, constant and class,
// and every member (method or accessor) of each class's prototype, each of the declared kind. An export added to or removed
// from either side fails here.
import { describe, expect, it } from 'vitest';

import { loadNativeBinding } from '../../src/fabric/native-binding';
import { declaredAddonExports, type DeclaredExport, type ExportKind } from './addon-declaration';

/** Own methods of a prototype: what a class defines, as opposed to a plain function's bare prototype. */
function prototypeMethods(value: { prototype?: object }): string[] {
  const proto = value.prototype;
  return proto === undefined ? [] : Object.getOwnPropertyNames(proto).filter((name) => name !== 'constructor');
}

function kindOf(value: unknown): ExportKind | string {
  if (typeof value === 'function') return prototypeMethods(value).length > 0 ? 'class' : 'function';
  return typeof value;
}

describe('native addon surface', () => {
  const addon = loadNativeBinding() as unknown as Record<string, unknown>;
  const declared = declaredAddonExports();
  const byName = new Map<string, DeclaredExport>(declared.map((d) => [d.name, d]));

  it('reads the declaration: the pool class, functions and constants', () => {
    expect(byName.get('NativePool')).toMatchObject({ kind: 'class', optional: false });
    expect(byName.get('NativePool')!.methods!.length).toBeGreaterThan(30);
    expect(byName.get('crc32c')).toMatchObject({ kind: 'function', optional: false });
    expect(byName.get('abiVersion')).toMatchObject({ kind: 'number', optional: false });
  });

  it('exports every declared name and nothing undeclared', () => {
    const exported = Object.keys(addon).sort();
    const undeclared = exported.filter((name) => !byName.has(name));
    const missing = declared.filter((d) => !d.optional && !(d.name in addon)).map((d) => d.name);
    expect({ undeclared, missing }).toEqual({ undeclared: [], missing: [] });
  });

  it('exports each name as the kind declared', () => {
    const kinds = Object.fromEntries(Object.keys(addon).map((name) => [name, kindOf(addon[name])]));
    const expected = Object.fromEntries(declared.filter((d) => d.name in addon).map((d) => [d.name, d.kind]));
    expect(kinds).toEqual(expected);
  });

  it('gives each class exactly the declared prototype members', () => {
    for (const d of declared.filter((e) => e.kind === 'class')) {
      const actual = prototypeMethods(addon[d.name] as { prototype?: object }).sort();
      expect(actual, d.name).toEqual([...d.methods!].sort());
    }
  });

  it('exports the optional AES-GCM pair exactly when gcmAvailable says so', () => {
    const optional = declared.filter((d) => d.optional).map((d) => d.name);
    expect(optional.sort()).toEqual(['gcmOpen', 'gcmSeal']);
    for (const name of optional) expect(name in addon, name).toBe(addon.gcmAvailable);
  });
});
