/**
 * Small value types shared by an entity and its {@link Ctx}: addresses, why an instance is
 * activated, who sent a message, log levels, and the error a message fails with.
 *
 * @module
 */

/** Where an entity lives, always inside the caller's own tenant. */
export interface Address {
  /** The entity type, as deployed by the tenant (for example `counter`). */
  entityType: string;
  /** The entity id within that type (any UTF-8 string). */
  id: string;
}

/**
 * An address from an entity type and an id.
 *
 * ```ts
 * address("counter", "c-1"); // { entityType: "counter", id: "c-1" }
 * ```
 */
export function address(entityType: string, id: string): Address {
  return { entityType, id };
}

/** Why `activate` is called. */
export type Activation =
  /** The entity has never had durable state written before (as far as the host knows). */
  | { kind: "first-start" }
  /** The entity ran before on this version: after passivation, a trap, or a node restart. */
  | { kind: "restarted" }
  /** The entity ran before on an older plugin version, `fromVersion`: migrate state here. */
  | { kind: "upgraded"; fromVersion: number }
  /** The type was rolled back from the newer version `fromVersion` to this one. */
  | { kind: "rolled-back"; fromVersion: number };

/** Who sent a message, as the host knows it (never the payload's claim). */
export type Sender =
  /** A client of the tenant, through the API or the CLI. */
  | { kind: "client" }
  /** An entity of the same tenant, by a tell or an ask. */
  | { kind: "entity"; address: Address }
  /** This entity's own reminder, made by `ctx.schedule`. */
  | { kind: "reminder"; timer: bigint };

/** Severity of a log line. */
export type Level = "trace" | "debug" | "info" | "warn" | "error";

/** The three ways a message fails, as in the WIT contract's `error` variant. */
export type ErrorKind = "bad-message" | "rejected" | "failed";

/**
 * Why a message failed: throw one from `handle` (every state write of the message is then
 * discarded); `ctx.tell` and `ctx.ask` throw one too.
 *
 * ```ts
 * throw EntityError.rejected("insufficient funds");
 * ```
 */
export class EntityError extends Error {
  constructor(
    /** Which of the contract's three kinds it is. */
    readonly kind: ErrorKind,
    /** The reason, for the client or the log. */
    readonly reason: string,
  ) {
    super(`${kind.replace("-", " ")}: ${reason}`);
    this.name = "EntityError";
  }

  /** The payload could not be decoded as a message of this entity. */
  static badMessage(reason: string): EntityError {
    return new EntityError("bad-message", reason);
  }

  /** The entity understood the message and refused it (a business rule). */
  static rejected(reason: string): EntityError {
    return new EntityError("rejected", reason);
  }

  /** Something went wrong: a limit, an unreachable target, a value that did not encode. */
  static failed(reason: string): EntityError {
    return new EntityError("failed", reason);
  }
}
