/**
 * {@link Ctx}: what an entity can do while it is activated or handles a message — durable
 * state, tells, asks, reminders, passivation, logging and time — over a {@link Backend} that is
 * the real host inside a component and an in-memory fake in `@tessera/sdk/testing`.
 *
 * @module
 */

import { type Decoder, any } from "./decode.js";
import { type Value, decode, encode } from "./msgpack.js";
import { type Address, EntityError, type Level, type Sender } from "./types.js";

/** The host operations a {@link Ctx} forwards to, in bytes. */
export interface Backend {
  selfAddress(): Address;
  get(key: string): Uint8Array | undefined;
  put(key: string, value: Uint8Array): void;
  delete(key: string): void;
  /** Throws an {@link EntityError} when the tell cannot be queued. */
  tell(to: Address, payload: Uint8Array): void;
  /** Throws an {@link EntityError} when the ask fails. */
  ask(to: Address, payload: Uint8Array, timeoutMs: number): Uint8Array;
  schedule(delayMs: bigint, payload: Uint8Array): bigint;
  cancel(timer: bigint): void;
  passivate(): void;
  log(level: Level, message: string): void;
  nowMs(): bigint;
}

/** The longest ask timeout the contract carries (a `u32` of milliseconds). */
const ASK_TIMEOUT_MS_MAX = 0xffff_ffff;

/**
 * What an entity can do while it is activated or handles a message.
 *
 * State writes (`put`, `delete`) of one message are atomic: committed together when `handle`
 * returns, discarded when it throws. Reads see the current message's own writes. Values are
 * MessagePack, exactly as the Rust SDK writes them, so both SDKs read each other's state.
 *
 * ```ts
 * const seen = ctx.get("seen", int64) ?? 0n;
 * ctx.put("seen", seen + 1n);
 * ctx.info(`seen ${seen + 1n} times`);
 * ```
 */
export class Ctx {
  /** The first failure of this call (a state value that did not decode, or {@link fail}). */
  private failure: EntityError | undefined;

  constructor(
    private readonly backend: Backend,
    /** Who sent the message being handled (`client` in `activate`). */
    readonly sender: Sender = { kind: "client" },
  ) {}

  /** This entity's own address. */
  selfAddress(): Address {
    return this.backend.selfAddress();
  }

  /**
   * Reads a durable state value, checked by `decoder` (any MessagePack value by default);
   * `undefined` when absent. A value that does not decode fails the current call, as in the
   * Rust SDK: `activate` is refused with the reason, or the message fails and keeps no write.
   */
  get<T = Value>(key: string, decoder?: Decoder<T>): T | undefined {
    const bytes = this.backend.get(key);
    if (bytes === undefined) return undefined;
    try {
      return (decoder ?? (any as Decoder<T>))(decode(bytes));
    } catch (error) {
      this.fail(EntityError.failed(`state value "${key}" did not decode: ${reason(error)}`));
      return undefined;
    }
  }

  /** Reads a durable state value as raw bytes. */
  getBytes(key: string): Uint8Array | undefined {
    return this.backend.get(key);
  }

  /** Writes a durable state value (encoded as MessagePack), atomically with this message. */
  put(key: string, value: unknown): void {
    this.backend.put(key, this.encode(value, `state value "${key}"`));
  }

  /** Writes a durable state value as raw bytes. */
  putBytes(key: string, value: Uint8Array): void {
    this.backend.put(key, value);
  }

  /** Deletes a durable state value, atomically with this message. */
  delete(key: string): void {
    this.backend.delete(key);
  }

  /**
   * Sends a one-way message to an entity of the same tenant, effectively once: committed with
   * this message's writes, delivered after the commit and retried until the receiver has
   * committed it; tells from one sender arrive in order. Throws an {@link EntityError} when
   * this message may queue no more tells.
   */
  tell(to: Address, msg: unknown): void {
    this.backend.tell(to, this.encode(msg, `message to ${format(to)}`));
  }

  /** Sends raw MessagePack bytes one way to another entity. */
  tellBytes(to: Address, payload: Uint8Array): void {
    this.backend.tell(to, payload);
  }

  /**
   * Sends a message to another entity of the same tenant and waits at most `timeoutMs` for
   * its reply, checked by `decoder`. Not atomic with this message's writes: use asks to read,
   * and tells for effects. Throws an {@link EntityError} when the ask fails (including a
   * `deadlock` failure when the target is already waiting on this entity).
   */
  ask<R = Value>(to: Address, msg: unknown, timeoutMs: number, decoder?: Decoder<R>): R {
    const reply = this.askBytes(to, this.encode(msg, `message to ${format(to)}`), timeoutMs);
    try {
      return (decoder ?? (any as Decoder<R>))(decode(reply));
    } catch (error) {
      throw EntityError.failed(`reply from ${format(to)} did not decode: ${reason(error)}`);
    }
  }

  /** Sends raw MessagePack bytes to another entity and returns its raw reply. */
  askBytes(to: Address, payload: Uint8Array, timeoutMs: number): Uint8Array {
    const bounded = Math.min(Math.max(Math.floor(timeoutMs), 0), ASK_TIMEOUT_MS_MAX);
    return this.backend.ask(to, payload, bounded);
  }

  /**
   * Sends `msg` to this entity after `delayMs`: a durable reminder, committed with this
   * message, that survives passivation, upgrades and restarts. Returns its timer id for
   * {@link cancel}; `ctx.sender` is `{ kind: "reminder", timer }` when it arrives.
   */
  schedule(delayMs: number | bigint, msg: unknown): bigint {
    return this.scheduleBytes(delayMs, this.encode(msg, "scheduled message"));
  }

  /** Sends raw MessagePack bytes to this entity after `delayMs`. */
  scheduleBytes(delayMs: number | bigint, payload: Uint8Array): bigint {
    const delay = typeof delayMs === "bigint" ? delayMs : BigInt(Math.max(Math.floor(delayMs), 0));
    return this.backend.schedule(BigInt.asUintN(64, delay), payload);
  }

  /** Cancels a reminder, durably, with this message's commit. Unknown timers are ignored. */
  cancel(timer: bigint): void {
    this.backend.cancel(timer);
  }

  /** Asks the host to passivate this entity after the current message. */
  passivate(): void {
    this.backend.passivate();
  }

  /** Wall-clock time in milliseconds since the Unix epoch, as the host sees it. */
  nowMs(): number {
    return Number(this.backend.nowMs());
  }

  /** Writes a line to the host log, tagged with this entity's address. */
  log(level: Level, message: string): void {
    this.backend.log(level, message);
  }

  /** {@link log} at `trace`. */
  trace(message: string): void {
    this.log("trace", message);
  }

  /** {@link log} at `debug`. */
  debug(message: string): void {
    this.log("debug", message);
  }

  /** {@link log} at `info`. */
  info(message: string): void {
    this.log("info", message);
  }

  /** {@link log} at `warn`. */
  warn(message: string): void {
    this.log("warn", message);
  }

  /** {@link log} at `error`. */
  error(message: string): void {
    this.log("error", message);
  }

  /**
   * Fails the current call with `error`, as a state value that does not decode does: in
   * `handle` the message fails with it and keeps none of its writes; in `activate` the
   * activation is refused with its reason. The first failure of a call wins.
   */
  fail(error: EntityError): void {
    this.failure ??= error;
  }

  /** The failure recorded during this call, if any. */
  takeFailure(): EntityError | undefined {
    const failure = this.failure;
    this.failure = undefined;
    return failure;
  }

  private encode(value: unknown, what: string): Uint8Array {
    try {
      return encode(value);
    } catch (error) {
      throw EntityError.failed(`${what} did not encode: ${reason(error)}`);
    }
  }
}

/** An address as `type/id`, as the Rust SDK prints it. */
export function format(address: Address): string {
  return `${address.entityType}/${address.id}`;
}

/** The human reason of anything thrown. */
export function reason(error: unknown): string {
  if (error instanceof EntityError) return error.reason;
  if (error instanceof Error) return error.message;
  return String(error);
}
