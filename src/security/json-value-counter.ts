// Counts, as a body arrives, an upper bound on the values and object members a JSON text holds: every
// `{`, `[` and `,` outside strings (a container of n entries has n-1 commas). JSON.parse's time grows with
// that count as much as with the bytes, so a server that caps the bytes caps the count too, before parsing.
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const COMMA = 0x2c;

export class JsonValueCounter {
  private inString = false;
  private escaped = false;
  private counted = 0;

  get count(): number {
    return this.counted;
  }

  /** Chunks in order; a string or escape split across two chunks is followed across. */
  feed(chunk: Uint8Array): void {
    let { inString, escaped, counted } = this;
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i];
      if (inString) {
        if (escaped) escaped = false;
        else if (byte === BACKSLASH) escaped = true;
        else if (byte === QUOTE) inString = false;
      } else if (byte === QUOTE) {
        inString = true;
      } else if (byte === OPEN_BRACE || byte === OPEN_BRACKET || byte === COMMA) {
        counted++;
      }
    }
    this.inString = inString;
    this.escaped = escaped;
    this.counted = counted;
  }
}
