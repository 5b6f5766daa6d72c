// One job at a time, in the order asked: what guards a resource shared by concurrent turns (the engine's
// one memory file, written and then loaded by llama.cpp). A failed job does not stop the ones after it.
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(job: () => Promise<T>): Promise<T> {
    const result = this.tail.then(job);
    this.tail = result.catch(() => undefined);
    return result;
  }
}
