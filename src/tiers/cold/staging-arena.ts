// Page-aligned shared staging memory for segment I/O, one arena per process. Slots are 4 MiB regions of
// one shared WebAssembly.Memory: the only memory JavaScript can get that is both page aligned (O_DIRECT
// rejects unaligned buffers, and ArrayBuffers are not aligned) and shared with worker threads without a
// copy or a transfer. The arena grows one slot at a time up to a cap and never shrinks or becomes
// garbage: V8 does not count shared wasm memory towards GC pressure, so short-lived ones could pile up
// unseen. A job holds a slot only while its I/O and crypto run; when all are taken, takers wait.

interface SharedMemory {
  buffer: SharedArrayBuffer;
  grow(pages: number): number;
}
interface WebAssemblyMemoryApi {
  Memory: new (descriptor: { initial: number; maximum: number; shared: true }) => SharedMemory;
}
// lib.dom is not in this project's lib list, so the one constructor used is typed here.
const wasm = (globalThis as unknown as { WebAssembly: WebAssemblyMemoryApi }).WebAssembly;
const WASM_PAGE_BYTES = 64 * 1024;

/** Bytes of one slot: a crypto job's worth (segment-writer's JOB_BYTES) or a whole segment header. */
export const SLOT_BYTES = 4 * 1024 * 1024;
/** 256 MiB across every store of the process, reserved as address space, committed as used. */
export const MAX_SLOTS = 64;
const SLOT_PAGES = SLOT_BYTES / WASM_PAGE_BYTES;

export interface StagingSlot {
  /** The whole slot, page aligned. */
  bytes: Uint8Array;
  index: number;
}

class StagingArena {
  private memory: SharedMemory | undefined;
  private slots = 0;
  private readonly free: number[] = [];
  private readonly waiting: Array<(slot: StagingSlot) => void> = [];

  /** A free slot, waiting for one when all MAX_SLOTS are held. */
  take(): Promise<StagingSlot> {
    const index = this.free.pop() ?? this.grow();
    if (index !== undefined) return Promise.resolve(this.slot(index));
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  give(slot: StagingSlot): void {
    const next = this.waiting.shift();
    if (next !== undefined) next(slot);
    else this.free.push(slot.index);
  }

  private grow(): number | undefined {
    if (this.slots === MAX_SLOTS) return undefined;
    if (this.memory === undefined) {
      this.memory = new wasm.Memory({ initial: SLOT_PAGES, maximum: SLOT_PAGES * MAX_SLOTS, shared: true });
      return this.slots++;
    }
    try {
      this.memory.grow(SLOT_PAGES);
    } catch {
      // The system would not commit more: make do with the slots there are (at least one).
      return undefined;
    }
    return this.slots++;
  }

  private slot(index: number): StagingSlot {
    // After a grow the memory has a new, longer SharedArrayBuffer; older ones stay valid but shorter.
    return { bytes: new Uint8Array(this.memory!.buffer, index * SLOT_BYTES, SLOT_BYTES), index };
  }
}

export const stagingArena = new StagingArena();
