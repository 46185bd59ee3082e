/**
 * Write Tessera entities in TypeScript: typed messages, durable state, tell/ask, reminders.
 *
 * The same entity model as the Rust SDK (`tessera-sdk`), over the same contract
 * (`tessera:entity@0.2.0`, built into a component by componentize-js): an entity type says how
 * to read its messages ({@link EntityType.message}, built from the decoders of this module)
 * and how to start an instance from durable state ({@link EntityType.activate}); the instance
 * handles one message at a time with a {@link Ctx}. Messages, replies and state are MessagePack
 * as rmp-serde writes them, so a client's JSON `{"Add":5}` or `"Get"` reaches a TypeScript
 * entity exactly as it reaches a Rust one.
 *
 * A whole entity (`plugins/counter-ts`):
 *
 * ```ts
 * import { type Ctx, type Decoded, EntityError, exportEntity, int64, unit, variants } from "@tessera/sdk";
 *
 * const Msg = variants({ Add: int64, Get: unit, Reset: unit });
 *
 * class Counter {
 *   constructor(private value: bigint) {}
 *   handle(ctx: Ctx, msg: Decoded<typeof Msg>): bigint {
 *     if (msg.tag === "Add") { this.value += msg.value; ctx.put("value", this.value); }
 *     return this.value;
 *   }
 * }
 *
 * export const handler = exportEntity({
 *   message: Msg,
 *   activate: (ctx) => new Counter(ctx.get("value", int64) ?? 0n),
 * });
 * ```
 *
 * Build it with `tessera build <dir>` (or `npm run build` in it); see docs/typescript.md.
 *
 * @module
 */

import { witBackend } from "./host.js";
import { type EntityType, Runner, type WitError } from "./runtime.js";
import type { Activation, Address, Sender } from "./types.js";

export { Ctx, type Backend } from "./ctx.js";
export * from "./decode.js";
export { type Value, CodecError, decode, encode, DECODE_DEPTH_MAX } from "./msgpack.js";
export type { EntityType, Instance } from "./runtime.js";
export * from "./types.js";

/** The contract's `handler` export, as componentize-js expects it. */
export interface Handler {
  activate(reason: WitActivation): void;
  handle(payload: Uint8Array, sender: WitSender): Uint8Array;
  deactivate(): void;
}

type WitActivation =
  | { tag: "first-start" }
  | { tag: "restarted" }
  | { tag: "upgraded"; val: number }
  | { tag: "rolled-back"; val: number };

type WitSender =
  | { tag: "client" }
  | { tag: "entity"; val: Address }
  | { tag: "reminder"; val: bigint };

/**
 * Exports an entity type as this component's `tessera:entity/handler`. Export its result as
 * `handler` from the module the build starts at, once per component:
 *
 * ```ts
 * export const handler = exportEntity({ message: Msg, activate: (ctx) => new Counter(ctx) });
 * ```
 */
export function exportEntity<Msg, Reply>(type: EntityType<Msg, Reply>): Handler {
  const runner = new Runner(type, () => witBackend);
  return {
    activate(reason) {
      try {
        runner.activate(activationFromWit(reason));
      } catch (refusal) {
        throw componentError(refusal);
      }
    },
    handle(payload, sender) {
      try {
        return runner.handle(payload, senderFromWit(sender));
      } catch (error) {
        throw componentError(error as WitError);
      }
    },
    deactivate() {
      runner.deactivate();
    },
  };
}

/** What an export throws for a `result`'s `err` case: an object carrying it as `payload`. */
function componentError(payload: unknown): { payload: unknown } {
  return { payload };
}

function activationFromWit(reason: WitActivation): Activation {
  switch (reason.tag) {
    case "upgraded":
      return { kind: "upgraded", fromVersion: reason.val };
    case "rolled-back":
      return { kind: "rolled-back", fromVersion: reason.val };
    default:
      return { kind: reason.tag };
  }
}

function senderFromWit(sender: WitSender): Sender {
  switch (sender.tag) {
    case "entity":
      return { kind: "entity", address: sender.val };
    case "reminder":
      return { kind: "reminder", timer: sender.val };
    default:
      return { kind: "client" };
  }
}
