// File names of manifests, derived from context ids reversibly so listing the directory lists the
// contexts. Only lowercase letters, digits, '-' and '_' stand for themselves; every other UTF-8 byte is
// '%' and two uppercase hex digits. That keeps names distinct on case-insensitive mounts (SMB, macOS),
// never starting with '.' (temp files do), and free of path separators.

export const MANIFEST_SUFFIX = '.manifest';
/** Leaves room for the suffix within the 255 bytes most file systems allow. */
export const MAX_CONTEXT_FILE_STEM = 240;
const PLAIN_BYTE = /^[a-z0-9_-]$/;
const STEM = /^(?:[a-z0-9_-]|%[0-9A-F]{2})+$/;

export function contextFileStem(contextId: string): string {
  let stem = '';
  for (const byte of Buffer.from(contextId, 'utf8')) {
    const char = String.fromCharCode(byte);
    stem += PLAIN_BYTE.test(char) ? char : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return stem;
}

export function manifestFileName(contextId: string): string {
  return `${contextFileStem(contextId)}${MANIFEST_SUFFIX}`;
}

/** The context id of a manifest file name, or undefined for any other name (temp and foreign files). */
export function contextIdOfManifestFile(name: string): string | undefined {
  if (!name.endsWith(MANIFEST_SUFFIX)) return undefined;
  const stem = name.slice(0, -MANIFEST_SUFFIX.length);
  if (!STEM.test(stem)) return undefined;
  const bytes: number[] = [];
  for (let i = 0; i < stem.length; i++) {
    if (stem[i] === '%') {
      bytes.push(parseInt(stem.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      bytes.push(stem.charCodeAt(i));
    }
  }
  const contextId = Buffer.from(bytes).toString('utf8');
  // Only names this module writes: one encoding per id, so a hand-made alias cannot shadow a context.
  return contextFileStem(contextId) === stem ? contextId : undefined;
}
