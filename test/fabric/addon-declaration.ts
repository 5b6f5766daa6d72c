// The native addon's surface as src/fabric/addon-types.ts declares it, read at run time through the
// TypeScript compiler's type checker: so the tests compare the addon with the declaration itself, and
// no hand-written list of names can drift from either.
import path from 'node:path';

import ts from 'typescript';

export type ExportKind = 'class' | 'function' | 'number' | 'boolean';

export interface DeclaredExport {
  name: string;
  kind: ExportKind;
  /** Declared optional (`name?`): the addon exports it only in some builds or processes. */
  optional: boolean;
  /** A class's prototype members (methods, and read-only accessors), in declaration order. */
  methods?: string[];
}

const DECLARATION = path.resolve(__dirname, '../../src/fabric/addon-types.ts');

function kindOf(checker: ts.TypeChecker, type: ts.Type, name: string): ExportKind {
  if (type.getConstructSignatures().length > 0) return 'class';
  if (type.getCallSignatures().length > 0) return 'function';
  if (type.flags & ts.TypeFlags.NumberLike) return 'number';
  if (type.flags & ts.TypeFlags.BooleanLike) return 'boolean';
  throw new Error(`addon-types.ts: ${name} is ${checker.typeToString(type)}, which the addon cannot export`);
}

function isReadonly(symbol: ts.Symbol): boolean {
  return (symbol.declarations ?? []).some((d) => (ts.getCombinedModifierFlags(d) & ts.ModifierFlags.Readonly) !== 0);
}

/** Every member of the NativeAddon interface, and for a class the members of what it constructs. */
export function declaredAddonExports(): DeclaredExport[] {
  const program = ts.createProgram([DECLARATION], {
    strict: true,
    target: ts.ScriptTarget.ES2022,
    lib: ['lib.es2022.d.ts'],
    types: [],
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(DECLARATION);
  const addon = source?.statements.find((s): s is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(s) && s.name.text === 'NativeAddon');
  if (addon === undefined) throw new Error('addon-types.ts declares no NativeAddon interface');
  return checker.getPropertiesOfType(checker.getTypeAtLocation(addon)).map((symbol) => {
    const optional = (symbol.flags & ts.SymbolFlags.Optional) !== 0;
    const type = checker.getNonNullableType(checker.getTypeOfSymbol(symbol));
    const kind = kindOf(checker, type, symbol.name);
    if (kind !== 'class') return { name: symbol.name, kind, optional };
    const instance = type.getConstructSignatures()[0]!.getReturnType();
    const methods = checker.getPropertiesOfType(instance).map((member) => {
      const memberType = checker.getNonNullableType(checker.getTypeOfSymbol(member));
      // A read-only string or number is a prototype accessor (node-addon-api's InstanceAccessor).
      const accessor = (memberType.flags & (ts.TypeFlags.StringLike | ts.TypeFlags.NumberLike)) !== 0 && isReadonly(member);
      if (!accessor && kindOf(checker, memberType, `${symbol.name}.${member.name}`) !== 'function')
        throw new Error(`addon-types.ts: ${symbol.name}.${member.name} is not a method or a read-only accessor`);
      return member.name;
    });
    return { name: symbol.name, kind, optional, methods };
  });
}
