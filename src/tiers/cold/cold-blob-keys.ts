// The cold tier's keys in a blob store: `cold/segments/<id>.seg` and `cold/manifests/<context>.manifest`.
// A context's part is its manifest file stem (context-names.ts: lowercase letters, digits, '-' and '_'
// stand for themselves, any other byte is %XX) with '.' for '%', since a blob key has no '%'; it is cut
// into pieces of at most PIECE characters, each led by 'm' (a key segment may not start with '.' and has
// at most 200 characters), so every context id the tier takes has a key, and the key gives back the id.
import { contextFileStem, contextIdOfManifestFile, MANIFEST_SUFFIX } from './context-names';
import { segmentIdOfFile } from './cold-directory';

export const COLD_PREFIX = 'cold/';
export const SEGMENTS_PREFIX = `${COLD_PREFIX}segments/`;
export const MANIFESTS_PREFIX = `${COLD_PREFIX}manifests/`;
/** Where a context's manifest-log records are (manifest-log-store.ts). */
export const MANIFEST_LOG_PREFIX = `${COLD_PREFIX}manifest-log/`;
const PIECE = 150;
const LEAD = 'm';

export function segmentKey(segmentId: string): string {
  return `${SEGMENTS_PREFIX}${segmentId}.seg`;
}

/** The segment id of a key under SEGMENTS_PREFIX, or undefined for any other key. */
export function segmentIdOfKey(key: string): string | undefined {
  return key.startsWith(SEGMENTS_PREFIX) ? segmentIdOfFile(key.slice(SEGMENTS_PREFIX.length)) : undefined;
}

export function manifestKey(contextId: string): string {
  return `${MANIFESTS_PREFIX}${contextKeyPath(contextId)}${MANIFEST_SUFFIX}`;
}

/** A context id as key segments, one key per id; a prefix that ends in '/' after it names exactly its keys. */
export function contextKeyPath(contextId: string): string {
  const escaped = contextFileStem(contextId).replaceAll('%', '.');
  const pieces: string[] = [];
  for (let at = 0; at < escaped.length; at += PIECE) pieces.push(LEAD + escaped.slice(at, at + PIECE));
  return pieces.join('/');
}

/** The context id of a key under MANIFESTS_PREFIX, or undefined for a key manifestKey does not make. */
export function contextIdOfKey(key: string): string | undefined {
  if (!key.startsWith(MANIFESTS_PREFIX) || !key.endsWith(MANIFEST_SUFFIX)) return undefined;
  const pieces = key.slice(MANIFESTS_PREFIX.length, -MANIFEST_SUFFIX.length).split('/');
  if (!pieces.every((piece) => piece.startsWith(LEAD))) return undefined;
  const stem = pieces.map((piece) => piece.slice(LEAD.length)).join('');
  if (stem.includes('%')) return undefined;
  const contextId = contextIdOfManifestFile(`${stem.replaceAll('.', '%')}${MANIFEST_SUFFIX}`);
  // One key per id: a hand-made alias (other cuts) is not a manifest of the tier.
  return contextId !== undefined && manifestKey(contextId) === key ? contextId : undefined;
}
