// The error codes are a contract between the C++ core and TypeScript: both lists in the same order, so
// a code the addon throws is a code TypeScript knows.
import fs from 'node:fs';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

import { ERROR_CODES } from '../../src/fabric/errors';

describe('error codes', () => {
  it('native/src/core/status.h names the same codes as ERROR_CODES, in the same order', () => {
    const header = fs.readFileSync(path.join(__dirname, '..', '..', 'native', 'src', 'core', 'status.h'), 'utf8');
    const enumBody = /enum class Code[^{]*\{([^}]*)\}/.exec(header)?.[1] ?? '';
    const enumerators = enumBody
      .split(',')
      .map((entry) => entry.replace(/=.*$/, '').trim())
      .filter(Boolean);
    const names = [...header.matchAll(/case Code::(k\w+): return "(\w+)";/g)].map((match) => [match[1], match[2]] as const);
    expect(enumerators[0]).toBe('kOk');
    // codeName's cases, in enum order, minus OK.
    const nameOf = new Map(names);
    expect(enumerators.slice(1).map((e) => nameOf.get(e))).toEqual([...ERROR_CODES]);
  });
});
