// The keys that actually seal Temporal payloads: derived from an operator's long-lived codec key with
// HKDF-SHA256 and a random 128-bit salt that travels in each sealed payload's header, one per codec
// instance (process), and derived anew after a bounded number of seals. Why: AES-GCM with random 96-bit
// IVs is safe for at most 2^32 seals under one key (NIST SP 800-38D, 8.3), and a codec key shared by every
// worker and client for months would pass that with nobody able to count (counting across processes would
// need coordination). A derived key per process and per 2^31 seals needs neither; the operator's key
// itself never seals anything. Two processes share a data key only if their random salts collide, which
// at 128 bits stays negligible (birthday bound) far past any plausible count of processes and rotations.
import { hkdfSync, randomBytes } from 'node:crypto';

export const SALT_BYTES = 16;
/** Half the SP 800-38D limit: a derived key retires long before its IV collisions matter. */
export const DEFAULT_SEALS_PER_DATA_KEY = 2 ** 31;
/** Decoding a history meets one salt per process that wrote it; a bounded cache skips re-deriving. */
const OPENING_KEYS_CACHED = 1024;

/** The operator's keys the data keys derive from (the payload codec's key ring). */
export interface MasterKeys {
  readonly activeKeyId: string;
  key(id: string): Buffer | undefined;
}

export interface DataKey {
  /** The operator's key it was derived from (sealed payloads name it). */
  keyId: string;
  salt: Buffer;
  key: Buffer;
}

export class DataKeys {
  private sealing: (DataKey & { seals: number }) | undefined;
  private readonly opening = new Map<string, Buffer>();

  constructor(
    private readonly ring: MasterKeys,
    private readonly sealsPerDataKey: number = DEFAULT_SEALS_PER_DATA_KEY,
  ) {
    if (!Number.isSafeInteger(sealsPerDataKey) || sealsPerDataKey < 1 || sealsPerDataKey > DEFAULT_SEALS_PER_DATA_KEY) {
      throw new RangeError(`sealsPerDataKey must be a whole number from 1 to 2^31, got ${sealsPerDataKey}`);
    }
  }

  /** The key for one more seal: the current one until it has sealed its share, then a fresh one. */
  forSealing(): DataKey {
    const keyId = this.ring.activeKeyId;
    if (!this.sealing || this.sealing.keyId !== keyId || this.sealing.seals >= this.sealsPerDataKey) {
      const salt = randomBytes(SALT_BYTES);
      this.sealing = { keyId, salt, key: derive(this.ring.key(keyId)!, keyId, salt), seals: 0 };
    }
    this.sealing.seals += 1;
    return this.sealing;
  }

  /** The key a payload sealed under (keyId, salt) opens with; undefined when the ring lacks keyId. */
  forOpening(keyId: string, salt: Buffer): Buffer | undefined {
    const master = this.ring.key(keyId);
    if (!master) return undefined;
    const name = `${keyId}\0${salt.toString('base64')}`;
    let key = this.opening.get(name);
    if (!key) {
      key = derive(master, keyId, salt);
      if (this.opening.size >= OPENING_KEYS_CACHED) this.opening.delete(this.opening.keys().next().value!);
      this.opening.set(name, key);
    }
    return key;
  }
}

/** The key id is in HKDF's info: the same key bytes under another id derive another key. */
function derive(master: Buffer, keyId: string, salt: Buffer): Buffer {
  return Buffer.from(hkdfSync('sha256', master, salt, `kvfabric.payload-key.v1\0${keyId}`, 32));
}
