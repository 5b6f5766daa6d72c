// Fixed, test-only keys, committed on purpose: the replay fixtures in test/temporal/histories are sealed
// with this codec key, and tests mint capabilities with this signing key. Never use them anywhere else.
import { ed25519PublicOf, type RawKey } from '../../src/security/key-list';

export const TEST_SIGNING_KEYS: RawKey[] = [
  { id: 'test-sign-1', key: Buffer.from('0TjV6j3Ix+Ym7jbv1c1ZkCvF3kQ7P1eVZb9xwz0sJmo=', 'base64') },
];
export const TEST_TRUSTED_KEYS: RawKey[] = TEST_SIGNING_KEYS.map(({ id, key }) => ({ id, key: ed25519PublicOf(key) }));
export const TEST_CODEC_KEYS: RawKey[] = [
  { id: 'test-codec-1', key: Buffer.from('q0Jz4dC0yJ3n8kq9m4Yb1u2PZr6tVw7xA5sE3cH9fLk=', 'base64') },
];

/** The environment-variable form of a key list (`id=base64,...`), for worker processes. */
export { keyListText } from '../../src/security/key-list';
