/**
 * Test an entity in Node.js, without a host: {@link TestHost} is an in-memory host (state
 * committed per message, tells, reminders and logs recorded, asks answered by handlers you
 * register) and {@link Harness} runs an entity type on it through the same decode → handle →
 * encode path as the component. Run test files with `tessera-ts test <file.test.ts>…`
 * (node:test), e.g. `npm test` in `plugins/counter-ts`.
 *
 * ```ts
 * const counter = new Harness(counterType, address("counter", "c-1"));
 * assert.deepEqual(counter.send({ Add: 2 }), { ok: 2 });
 * counter.restart();
 * assert.deepEqual(counter.send("Get"), { ok: 2 });
 * ```
 *
 * @module
 */

import type { Backend } from "./ctx.js";
import { type Value, decode, encode } from "./msgpack.js";
import { type EntityType, Runner, type WitError } from "./runtime.js";
import { type Activation, type Address, EntityError, type Level, type Sender } from "./types.js";

/** A tell the entity made, committed with its message. */
export interface SentTell {
  to: Address;
  payload: Value;
}

/** A reminder the entity scheduled, committed with its message. */
export interface Scheduled {
  timer: bigint;
  delayMs: bigint;
  payload: Value;
  cancelled: boolean;
}

/** An in-memory host: what a message writes is kept only if the message succeeds. */
export class TestHost implements Backend {
  /** Committed state, as bytes. */
  readonly committed = new Map<string, Uint8Array>();
  /** Committed tells, in order. */
  readonly tells: SentTell[] = [];
  /** Committed reminders, in order. */
  readonly schedules: Scheduled[] = [];
  /** Log lines, in order (kept even when the message fails, as the host's log is). */
  readonly logs: [Level, string][] = [];
  /** Whether a committed message asked to passivate. */
  passivationRequested = false;
  /** What `nowMs` answers. */
  now = 0n;

  private pending = new Map<string, Uint8Array | null>();
  private pendingTells: SentTell[] = [];
  private pendingSchedules: Scheduled[] = [];
  private pendingCancels: bigint[] = [];
  private pendingPassivate = false;
  private nextTimer = 1n;
  private readonly askHandlers = new Map<string, (payload: Value) => Value>();

  constructor(readonly address: Address) {}

  /** Answers asks to `to` with `reply(message)`; throw an {@link EntityError} to fail them. */
  onAsk(to: Address, reply: (message: Value) => Value): void {
    this.askHandlers.set(key(to), reply);
  }

  /** A committed state value, decoded. */
  state(name: string): Value | undefined {
    const bytes = this.committed.get(name);
    return bytes === undefined ? undefined : decode(bytes);
  }

  /** Keeps what the current message wrote, sent and scheduled. */
  commit(): void {
    for (const [name, value] of this.pending) {
      if (value === null) this.committed.delete(name);
      else this.committed.set(name, value);
    }
    this.tells.push(...this.pendingTells);
    this.schedules.push(...this.pendingSchedules);
    for (const timer of this.pendingCancels) {
      for (const scheduled of this.schedules) {
        if (scheduled.timer === timer) scheduled.cancelled = true;
      }
    }
    this.passivationRequested ||= this.pendingPassivate;
    this.abort();
  }

  /** Discards what the current message wrote, sent and scheduled. */
  abort(): void {
    this.pending = new Map();
    this.pendingTells = [];
    this.pendingSchedules = [];
    this.pendingCancels = [];
    this.pendingPassivate = false;
  }

  selfAddress(): Address {
    return this.address;
  }

  get(name: string): Uint8Array | undefined {
    if (this.pending.has(name)) return this.pending.get(name) ?? undefined;
    return this.committed.get(name);
  }

  put(name: string, value: Uint8Array): void {
    this.pending.set(name, value.slice());
  }

  delete(name: string): void {
    this.pending.set(name, null);
  }

  tell(to: Address, payload: Uint8Array): void {
    this.pendingTells.push({ to, payload: decode(payload) });
  }

  ask(to: Address, payload: Uint8Array): Uint8Array {
    const handler = this.askHandlers.get(key(to));
    if (handler === undefined) {
      throw EntityError.failed(`no test handler answers asks to ${key(to)}`);
    }
    return encode(handler(decode(payload)));
  }

  schedule(delayMs: bigint, payload: Uint8Array): bigint {
    const timer = this.nextTimer;
    this.nextTimer += 1n;
    this.pendingSchedules.push({ timer, delayMs, payload: decode(payload), cancelled: false });
    return timer;
  }

  cancel(timer: bigint): void {
    this.pendingCancels.push(timer);
  }

  passivate(): void {
    this.pendingPassivate = true;
  }

  log(level: Level, message: string): void {
    this.logs.push([level, message]);
  }

  nowMs(): bigint {
    return this.now;
  }
}

/** A message's outcome: the decoded reply, or the error it failed with. */
export type Outcome = { ok: Value } | { err: EntityError };

/** Runs one entity of `type` on a {@link TestHost}, message by message. */
export class Harness<Msg, Reply> {
  readonly host: TestHost;
  private runner: Runner<Msg, Reply>;

  constructor(
    private readonly type: EntityType<Msg, Reply>,
    address: Address,
  ) {
    this.host = new TestHost(address);
    this.runner = new Runner(type, () => this.host);
  }

  /** Sends `message` (any value, encoded as a client's would be) from a client. */
  send(message: unknown, sender: Sender = { kind: "client" }): Outcome {
    try {
      const reply = this.runner.handle(encode(message), sender);
      this.host.commit();
      return { ok: decode(reply) };
    } catch (error) {
      this.host.abort();
      const { tag, val } = error as WitError;
      return { err: new EntityError(tag, val) };
    }
  }

  /** Activates a fresh instance, as the host does after passivation, a trap or a restart. */
  restart(reason: Activation = { kind: "restarted" }): Outcome {
    this.runner.deactivate();
    this.runner = new Runner(this.type, () => this.host);
    try {
      this.runner.activate(reason);
      this.host.commit();
      return { ok: null };
    } catch (refusal) {
      this.host.abort();
      return { err: EntityError.failed(String(refusal)) };
    }
  }

  /** A committed state value, decoded. */
  state(name: string): Value | undefined {
    return this.host.state(name);
  }
}

function key(address: Address): string {
  return `${address.entityType}/${address.id}`;
}
