// Keys come from the environment or a file as `id=base64` entries (comma or newline separated), the same
// format as the cold tier's KVFABRIC_KEYS; never from flags (flags show in `ps`). Ed25519 keys are the raw
// 32 bytes of RFC 8032 wrapped in their fixed RFC 8410 DER headers, so Node's crypto imports them as is.
import { createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';

import { FabricError } from '../fabric/errors';
import { quotedId } from '../identity/printable-id';
import { readProtectedFile, type FileSensitivity } from './protected-file';

export interface RawKey {
  id: string;
  key: Buffer;
}

/** Key ids name keys in key files, token and payload headers, errors and logs: a conservative alphabet. */
const KEY_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const KEY_ID_RULE = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit";
// PKCS#8 PrivateKeyInfo and SubjectPublicKeyInfo headers for id-Ed25519 (1.3.101.112), RFC 8410 section 7/4.
const ED25519_PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/** `what` names the setting in errors; only positions and ids are ever named, never values. */
export function parseKeyList(source: string, what: string, bytes = 32): RawKey[] {
  const keys = source
    .split(/[,\n]/)
    .map((entry) => entry.trim())
    .filter((entry) => entry.length > 0 && !entry.startsWith('#'))
    .map((entry, i) => {
      const at = entry.indexOf('=');
      const id = entry.slice(0, at);
      if (at <= 0 || !KEY_ID.test(id)) throw new Error(`${what}: entry ${i + 1} must be id=base64 with a short id`);
      const key = Buffer.from(entry.slice(at + 1), 'base64');
      if (key.length !== bytes) throw new Error(`${what}: key ${i + 1} ('${id}') must be ${bytes} bytes of base64`);
      return { id, key };
    });
  if (keys.length === 0) throw new Error(`${what}: no key given`);
  if (new Set(keys.map((k) => k.id)).size !== keys.length) throw new Error(`${what}: key ids must be unique`);
  return keys;
}

/**
 * Refuses keys whose ids are not key ids (INVALID_ARGUMENT, the id escaped): the classes that take keys
 * check them as the key-list readers do, since a program may hand them keys from anywhere.
 */
export function checkKeyIds(keys: readonly RawKey[], what: string): void {
  for (const { id } of keys)
    if (typeof id !== 'string' || !KEY_ID.test(id))
      throw new FabricError('INVALID_ARGUMENT', `${what}: key id ${quotedId(String(id))} must be ${KEY_ID_RULE}`);
}

/** The text form parseKeyList reads: `id=base64`, one key a line (a file) and `,`-joined (a variable). */
export function keyListText(keys: readonly RawKey[], separator: ',' | '\n' = ','): string {
  return keys.map(({ id, key }) => `${id}=${key.toString('base64')}`).join(separator);
}

/**
 * Keys from an inline variable, else the file `<variable>_FILE` names (refused when its mode exposes it:
 * protected-file.ts; `public` for a list of public keys); undefined when neither is set.
 */
export function keyListFromEnv(
  env: NodeJS.ProcessEnv,
  variable: string,
  sensitivity: FileSensitivity = 'secret',
  bytes = 32,
): RawKey[] | undefined {
  const inline = env[variable];
  const file = env[`${variable}_FILE`];
  const source = inline ?? (file ? readProtectedFile(file, `${variable}_FILE`, sensitivity) : undefined);
  return source === undefined ? undefined : parseKeyList(source, variable, bytes);
}

export function ed25519PrivateKey(seed: Buffer): KeyObject {
  return createPrivateKey({ key: Buffer.concat([ED25519_PKCS8_PREFIX, seed]), format: 'der', type: 'pkcs8' });
}

export function ed25519PublicKey(raw: Buffer): KeyObject {
  return createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: 'der', type: 'spki' });
}

/** The raw public half of a raw private key: what an operator hands to workers. */
export function ed25519PublicOf(seed: Buffer): Buffer {
  const der = createPublicKey(ed25519PrivateKey(seed)).export({ format: 'der', type: 'spki' });
  return der.subarray(ED25519_SPKI_PREFIX.length);
}
