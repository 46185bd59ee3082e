/**
 * Typed messages: small decoders that check a decoded MessagePack value has the shape an
 * entity expects and give it a TypeScript type, as serde's derives do for the Rust SDK. A
 * value of the wrong shape throws a {@link EntityError} of kind `bad-message`, which the SDK
 * answers without calling `handle`.
 *
 * Enums follow serde's default (externally tagged) form, so a Rust entity and a TypeScript one
 * understand the same messages: `"Get"` is a unit variant, `{"Add": 5}` a variant with a value.
 *
 * ```ts
 * const Msg = variants({ Add: int64, Get: unit, Reset: unit });
 * type Msg = Decoded<typeof Msg>; // { tag: "Add"; value: bigint } | { tag: "Get" } | ...
 * Msg(decode(payload));
 * ```
 *
 * @module
 */

import type { Value } from "./msgpack.js";
import { EntityError } from "./types.js";

/** Checks and converts a decoded value; throws a `bad-message` {@link EntityError}. */
export type Decoder<T> = (value: Value) => T;

/** The type a decoder produces. */
export type Decoded<D> = D extends Decoder<infer T> ? T : never;

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;
const U64_MAX = 2n ** 64n - 1n;

function bad(expected: string, value: Value): EntityError {
  return EntityError.badMessage(`invalid type: ${describe(value)}, expected ${expected}`);
}

function describe(value: Value): string {
  if (value === null) return "nil";
  if (value instanceof Uint8Array) return "bytes";
  if (Array.isArray(value)) return "an array";
  if (value instanceof Map || typeof value === "object") return "a map";
  if (typeof value === "string") return `string ${JSON.stringify(value)}`;
  return `${typeof value} ${String(value)}`;
}

/** Any value, unchecked. */
export const any: Decoder<Value> = (value) => value;

/** A variant or field with no value: nil (or absent). */
export const unit: Decoder<null> = (value) => {
  if (value !== null) throw bad("unit", value);
  return null;
};

/** A signed 64-bit integer (`i64`), always as a `bigint`. */
export const int64: Decoder<bigint> = (value) => {
  if (typeof value === "number" && Number.isInteger(value)) return BigInt(value);
  if (typeof value === "bigint" && value >= I64_MIN && value <= I64_MAX) return value;
  throw bad("i64", value);
};

/** An unsigned 64-bit integer (`u64`), always as a `bigint`. */
export const uint64: Decoder<bigint> = (value) => {
  if (typeof value === "number" && Number.isInteger(value) && value >= 0) return BigInt(value);
  if (typeof value === "bigint" && value >= 0n && value <= U64_MAX) return value;
  throw bad("u64", value);
};

/** A number (integer or float) that fits a JavaScript `number`. */
export const number: Decoder<number> = (value) => {
  if (typeof value === "number") return value;
  throw bad("a number", value);
};

/** A UTF-8 string. */
export const string: Decoder<string> = (value) => {
  if (typeof value === "string") return value;
  throw bad("a string", value);
};

/** A boolean. */
export const boolean: Decoder<boolean> = (value) => {
  if (typeof value === "boolean") return value;
  throw bad("a boolean", value);
};

/** MessagePack `bin` data. */
export const bytes: Decoder<Uint8Array> = (value) => {
  if (value instanceof Uint8Array) return value;
  throw bad("bytes", value);
};

/** An array of `item`s. */
export function array<T>(item: Decoder<T>): Decoder<T[]> {
  return (value) => {
    if (!Array.isArray(value)) throw bad("an array", value);
    return value.map(item);
  };
}

/** `T` or nil (Rust's `Option<T>`). */
export function optional<T>(inner: Decoder<T>): Decoder<T | null> {
  return (value) => (value === null ? null : inner(value));
}

/** A struct with named fields (a map with string keys); a missing field decodes as nil. */
export function struct<F extends Record<string, Decoder<unknown>>>(
  fields: F,
): Decoder<{ [K in keyof F]: Decoded<F[K]> }> {
  return (value) => {
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw bad("a struct", value);
    }
    if (value instanceof Uint8Array || value instanceof Map) throw bad("a struct", value);
    const out: Record<string, unknown> = {};
    for (const [name, field] of Object.entries(fields)) {
      const present = Object.prototype.hasOwnProperty.call(value, name);
      try {
        out[name] = field(present ? value[name] : null);
      } catch (error) {
        if (!present) throw EntityError.badMessage(`missing field \`${name}\``);
        throw error;
      }
    }
    return out as { [K in keyof F]: Decoded<F[K]> };
  };
}

/** One variant of {@link variants}: its tag, and its value unless it is a unit variant. */
export type Variant<V extends Record<string, Decoder<unknown>>> = {
  [K in keyof V & string]: V[K] extends Decoder<null> ? { tag: K } : { tag: K; value: Decoded<V[K]> };
}[keyof V & string];

/**
 * An externally tagged enum, serde's default: a unit variant is the string of its name
 * (`"Get"`), any other a one-entry map from its name to its value (`{"Add": 5}`).
 */
export function variants<V extends Record<string, Decoder<unknown>>>(
  cases: V,
): Decoder<Variant<V>> {
  const names = Object.keys(cases);
  const expected = names.map((name) => `\`${name}\``).join(", ");
  const lookup = (tag: string): Decoder<unknown> => {
    if (!Object.prototype.hasOwnProperty.call(cases, tag)) {
      throw EntityError.badMessage(`unknown variant \`${tag}\`, expected one of ${expected}`);
    }
    return cases[tag] as Decoder<unknown>;
  };
  return (value) => {
    let tag: string;
    let inner: Value;
    if (typeof value === "string") {
      tag = value;
      inner = null;
    } else if (
      value !== null &&
      typeof value === "object" &&
      !Array.isArray(value) &&
      !(value instanceof Uint8Array) &&
      !(value instanceof Map) &&
      Object.keys(value).length === 1
    ) {
      tag = Object.keys(value)[0] as string;
      inner = value[tag] as Value;
    } else {
      throw bad("an enum variant (a string or a one-entry map)", value);
    }
    const decoder = lookup(tag);
    const decoded = decoder(inner);
    return (decoder === unit ? { tag } : { tag, value: decoded }) as Variant<V>;
  };
}
