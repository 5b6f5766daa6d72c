// Caps a server's open connections. Whoever can reach the port can open connections without any
// credential, and each one costs a socket and parser state until a timeout closes it; so at the cap a new
// connection replaces the oldest one that has no request in progress (one that never sent a request, or
// a kept-alive one between requests: a real client reconnects), and is closed itself only when every open
// connection is in the middle of a request. A flood of idle connections therefore never locks a real
// client out, and the count never passes the cap.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

export class ConnectionCap {
  /** Insertion order is age: the first connection without a request in progress is the one to replace. */
  private readonly open = new Map<Socket, { requests: number }>();

  constructor(
    server: Server,
    private readonly max: number,
  ) {
    server.on('connection', (socket: Socket) => this.admit(socket));
  }

  get size(): number {
    return this.open.size;
  }

  /** Marks the request's connection busy until its response is finished or abandoned. */
  requestStarted(req: IncomingMessage, res: ServerResponse): void {
    const entry = this.open.get(req.socket);
    if (!entry) return;
    entry.requests += 1;
    res.once('close', () => {
      entry.requests -= 1;
    });
  }

  /** Closes every connection with no request in progress (server shutdown). */
  closeIdle(): void {
    for (const [socket, { requests }] of this.open) if (requests === 0) this.drop(socket);
  }

  private admit(socket: Socket): void {
    if (this.open.size >= this.max) {
      const idle = [...this.open].find(([, entry]) => entry.requests === 0)?.[0];
      if (!idle) {
        socket.destroy();
        return;
      }
      this.drop(idle);
    }
    this.open.set(socket, { requests: 0 });
    socket.once('close', () => this.open.delete(socket));
  }

  /** Forgotten at once, not on its 'close' event: the next admission in this tick must not count it. */
  private drop(socket: Socket): void {
    this.open.delete(socket);
    socket.destroy();
  }
}
