// Failure messages and stack traces move into an encoded attributes payload, which the payload codec
// then seals: an error naming a context or a count is as private as a result. Loaded by path, not
// imported (failureConverterPath in data-converter.ts): bundled into the workflow sandbox, and required
// by the client and the worker.
import { DefaultFailureConverter } from '@temporalio/common';

export const failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
