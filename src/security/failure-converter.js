// Failure messages and stack traces move into an encoded attributes payload, which the payload codec
// then seals: an error naming a context or a count is as private as a result. Loaded by path, in the
// workflow sandbox (bundled) and by the client and worker (require), so it is plain CommonJS: a
// TypeScript file could not be required by processes that run without a TypeScript loader (vitest).
'use strict';
const { DefaultFailureConverter } = require('@temporalio/common');

exports.failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
