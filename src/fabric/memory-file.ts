// Memory files (memfd) for engines that load a context by path: the addon's class, loaded once.
import { loadNativeBinding } from './native-binding';
import type { MemoryFile } from './types';

/** A memory file named `name`; UNAVAILABLE where the system has none (not Linux). */
export function createMemoryFile(name: string): MemoryFile {
  return new (loadNativeBinding().MemoryFile)(name);
}
