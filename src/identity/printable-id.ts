// Ids that come from outside (the key id in a sealed header anyone can write, an agent id in a search
// attribute) end up in errors, logs and terminals. Printed raw, a newline forges a log line, an ANSI escape
// rewrites the reader's terminal, a bidi control reorders what they see, and a quote ends the id early so
// that a reader (a person, or the client's own parser) takes another id for it. Ids kvfabric sets itself
// match strict patterns and print unchanged.
//
// Escapes: `\\`, `\'` (quoted ids only), and `\xHH`, `\uHHHH` or `\u{H...}` for every control, format,
// separator, private-use, unassigned or lone surrogate code point; quotedId's form reads back exactly
// (unquoteId).

/** Control (C*: Cc, Cf, Cs, Co, Cn) and line or paragraph separators: nothing a terminal should get raw. */
const UNPRINTABLE = /[\p{C}\p{Zl}\p{Zp}]/gu;
const UNPRINTABLE_OR_QUOTING = /[\p{C}\p{Zl}\p{Zp}\\']/gu;
/** The longest id printed, in UTF-16 units: ids of ours are at most 64 characters. */
const MAX_PRINTED = 64;

/** `'id'`, escaped and cut at 64 characters: unambiguous, one line, and inert on a terminal. */
export function quotedId(id: string): string {
  return `'${id.slice(0, MAX_PRINTED).replace(UNPRINTABLE_OR_QUOTING, escaped)}'`;
}

/** A quotedId in text (the id without its quotes in group 1), for a reader of messages that print one. */
export const QUOTED_ID = /'((?:[^'\\]|\\.)*)'/;

/** The id a quotedId printed (the text between its quotes). */
export function unquoteId(printed: string): string {
  return printed.replace(/\\(x[0-9a-f]{2}|u[0-9a-f]{4}|u\{[0-9a-f]+\}|[\s\S])/g, (_all, code: string) => {
    if (code.length === 1) return code;
    const hex = code.startsWith('u{') ? code.slice(2, -1) : code.slice(1);
    return String.fromCodePoint(Number.parseInt(hex, 16));
  });
}

/** Free text from outside (a refusal's reason), with what a terminal should not get raw escaped. */
export function printable(text: string): string {
  return text.replace(UNPRINTABLE, escaped);
}

function escaped(char: string): string {
  if (char === '\\' || char === "'") return `\\${char}`;
  const code = char.codePointAt(0)!;
  if (code <= 0xff) return `\\x${code.toString(16).padStart(2, '0')}`;
  if (code <= 0xffff) return `\\u${code.toString(16).padStart(4, '0')}`;
  return `\\u{${code.toString(16)}}`;
}
