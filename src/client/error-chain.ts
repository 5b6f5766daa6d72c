// The messages of an error and of its causes: the SDK wraps the server's answer ("Failed to start
// Workflow", "Workflow Update failed") around the error that says what happened.

/** Each message of the chain, the outermost first (at most 8 deep). */
export function messageChain(err: unknown): string[] {
  const messages: string[] = [];
  for (let current = err, depth = 0; current && depth < 8; current = (current as { cause?: unknown }).cause, depth++) {
    messages.push(current instanceof Error ? current.message : String(current));
  }
  return messages;
}

/** The chain's messages joined, one per line, for a search through all of them. */
export function messagesOf(err: unknown): string {
  return messageChain(err).join('\n');
}
