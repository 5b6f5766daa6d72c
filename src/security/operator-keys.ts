// A fresh set of the keys a deployment runs on (what `kvfabric keygen` writes): the control plane's
// Ed25519 capability signing key and its public half for workers, a payload codec key, a cold-tier master
// key and the codec server's bearer token. Key ids carry the day and a random suffix, so a later set
// rotates in beside this one (every list takes several `id=base64` entries) without an id clash.
import { randomBytes } from 'node:crypto';

import { ed25519PublicOf, type RawKey } from './key-list';

export interface OperatorKeys {
  /** Ed25519 private keys (raw 32-byte seeds): KVFABRIC_SIGNING_KEYS, the control plane only. */
  signing: RawKey[];
  /** Their public halves under the same ids: KVFABRIC_TRUSTED_KEYS, every worker. */
  trusted: RawKey[];
  /** AES-256 payload codec keys: KVFABRIC_CODEC_KEYS, everyone who talks to Temporal. */
  codec: RawKey[];
  /** AES-256 cold-tier master keys: KVFABRIC_KEYS or --key-file, every worker sharing a tier directory. */
  master: RawKey[];
  /** The codec server's bearer token (base64url, 43 characters). */
  codecServerToken: string;
}

export function newOperatorKeys(now: Date = new Date()): OperatorKeys {
  const suffix = `${now.toISOString().slice(0, 10).replaceAll('-', '')}-${randomBytes(3).toString('hex')}`;
  const signing = [{ id: `sign-${suffix}`, key: randomBytes(32) }];
  return {
    signing,
    trusted: signing.map(({ id, key }) => ({ id, key: ed25519PublicOf(key) })),
    codec: [{ id: `codec-${suffix}`, key: randomBytes(32) }],
    master: [{ id: `master-${suffix}`, key: randomBytes(32) }],
    codecServerToken: randomBytes(32).toString('base64url'),
  };
}
