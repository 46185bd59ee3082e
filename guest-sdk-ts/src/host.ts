/**
 * The {@link Backend} inside a component: the contract's host imports, with their errors
 * turned into {@link EntityError}s. Only {@link exportEntity} uses it, so the rest of the SDK
 * runs outside a component too (the testing harness).
 *
 * @module
 */

import {
  ask,
  cancel,
  delete as del,
  get,
  log,
  nowMs,
  passivate,
  put,
  schedule,
  selfAddress,
  tell,
} from "tessera:entity/host@0.2.0";
import type { Backend } from "./ctx.js";
import { EntityError, type ErrorKind } from "./types.js";

/** The real host, through the component's imports. */
export const witBackend: Backend = {
  selfAddress: () => selfAddress(),
  get: (key) => get(key),
  put: (key, value) => put(key, value),
  delete: (key) => del(key),
  tell: (to, payload) => hostCall(() => tell(to, payload)),
  ask: (to, payload, timeoutMs) => hostCall(() => ask(to, payload, timeoutMs)),
  schedule: (delayMs, payload) => schedule(delayMs, payload),
  cancel: (timer) => cancel(timer),
  passivate: () => passivate(),
  log: (level, message) => log(level, message),
  nowMs: () => nowMs(),
};

/** Runs an import that returns `result<_, error>`: its `err` arrives as a thrown payload. */
function hostCall<T>(call: () => T): T {
  try {
    return call();
  } catch (thrown) {
    const error = (thrown as { payload?: unknown })?.payload ?? thrown;
    const { tag, val } = (error ?? {}) as { tag?: ErrorKind; val?: string };
    if (tag === "bad-message" || tag === "rejected" || tag === "failed") {
      throw new EntityError(tag, String(val));
    }
    throw EntityError.failed(String(thrown));
  }
}
