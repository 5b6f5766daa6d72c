// The messages of an error and of its causes, joined: the SDK wraps the server's answer ("Failed to start
// Workflow", "Workflow Update failed") around the error that says what happened.
export function messagesOf(err: unknown): string {
  const messages: string[] = [];
  for (let current = err, depth = 0; current && depth < 8; current = (current as { cause?: unknown }).cause, depth++) {
    messages.push(current instanceof Error ? current.message : String(current));
  }
  return messages.join('\n');
}
