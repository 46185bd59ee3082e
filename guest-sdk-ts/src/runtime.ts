/**
 * The entity model and the glue between it and the contract's `handler` export: one live
 * instance per component, decode → handle → encode per message, and the mapping of errors to
 * the WIT `error` variant. Shared by {@link exportEntity} (the real host) and the testing
 * harness (an in-memory host), so both run the same path.
 *
 * @module
 */

import { type Backend, Ctx, reason } from "./ctx.js";
import type { Decoder } from "./decode.js";
import { decode, encode } from "./msgpack.js";
import { type Activation, EntityError, type Sender } from "./types.js";

/** A live instance: fed one message at a time. */
export interface Instance<Msg, Reply> {
  /**
   * Handles one message. Every state write made here is committed together if it returns,
   * and discarded if it throws (an {@link EntityError} says which kind of failure it is).
   */
  handle(ctx: Ctx, msg: Msg): Reply;
  /** Called once before the instance is dropped on passivation or upgrade. */
  deactivate?(ctx: Ctx): void;
}

/** An entity type: how to read its messages and how to start an instance. */
export interface EntityType<Msg, Reply> {
  /** Checks a decoded payload and types it; a value of the wrong shape is a bad message. */
  message: Decoder<Msg>;
  /**
   * Starts an instance: rebuild in-memory state from `ctx.get` here, and migrate it after an
   * upgrade or a rollback (writes made here are committed before the first message). Throwing,
   * or a state value that does not decode, refuses the activation with the reason.
   */
  activate(ctx: Ctx, reason: Activation): Instance<Msg, Reply>;
}

/** The contract's `error` variant as the component bindings carry it. */
export type WitError = { tag: ErrorTag; val: string };
type ErrorTag = "bad-message" | "rejected" | "failed";

/** Runs one entity type: the instance between calls and the three calls of the contract. */
export class Runner<Msg, Reply> {
  private instance: Instance<Msg, Reply> | undefined;

  constructor(
    private readonly type: EntityType<Msg, Reply>,
    private readonly backend: () => Backend,
  ) {}

  /** `activate`: starts the instance, or throws the reason it was refused. */
  activate(reason_: Activation): void {
    this.instance = undefined;
    const ctx = new Ctx(this.backend());
    const instance = this.start(ctx, reason_);
    if (instance instanceof EntityError) throw instance.reason;
    this.instance = instance;
  }

  /** `handle`: the reply bytes, or throws a {@link WitError}. */
  handle(payload: Uint8Array, sender: Sender): Uint8Array {
    const ctx = new Ctx(this.backend(), sender);
    let msg: Msg;
    try {
      msg = this.type.message(decode(payload));
    } catch (error) {
      throw toWit(error instanceof EntityError ? error : EntityError.badMessage(reason(error)));
    }
    if (this.instance === undefined) {
      // The host skipped `activate` (a fresh instance of a running entity).
      const instance = this.start(ctx, { kind: "restarted" });
      if (instance instanceof EntityError) throw toWit(instance);
      this.instance = instance;
    }
    let reply: Reply;
    try {
      reply = this.instance.handle(ctx, msg);
    } catch (error) {
      if (!(error instanceof EntityError)) {
        // An unexpected exception may have left the instance half-updated: drop it, so the
        // next message rebuilds it from durable state, as a trap does for a Rust entity.
        this.instance = undefined;
        throw toWit(EntityError.failed(`the entity threw: ${reason(error)}`));
      }
      throw toWit(error);
    }
    const failure = ctx.takeFailure();
    if (failure !== undefined) throw toWit(failure);
    try {
      return encode(reply);
    } catch (error) {
      throw toWit(EntityError.failed(`reply did not encode: ${reason(error)}`));
    }
  }

  /** `deactivate`: lets the instance clean up, then drops it. */
  deactivate(): void {
    const instance = this.instance;
    this.instance = undefined;
    instance?.deactivate?.(new Ctx(this.backend()));
  }

  private start(ctx: Ctx, why: Activation): Instance<Msg, Reply> | EntityError {
    let instance: Instance<Msg, Reply>;
    try {
      instance = this.type.activate(ctx, why);
    } catch (error) {
      return error instanceof EntityError ? error : EntityError.failed(reason(error));
    }
    return ctx.takeFailure() ?? instance;
  }
}

function toWit(error: EntityError): WitError {
  return { tag: error.kind, val: error.reason };
}
