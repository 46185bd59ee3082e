/**
 * The one encoding across the wasm boundary: MessagePack, written the way the Rust SDK's
 * rmp-serde writes it, so a TypeScript entity and a Rust one exchange and store the same bytes.
 *
 * Written here (about 250 lines) rather than taken from npm: integers must round-trip as 64-bit
 * values (`i64`/`u64` in Rust), which JavaScript numbers cannot hold past 2^53, and they must be
 * encoded in the smallest form, as rmp-serde does, so replies and state are byte-for-byte alike.
 *
 * | MessagePack      | JavaScript                                                      |
 * | ---------------- | --------------------------------------------------------------- |
 * | nil              | `null` (`undefined` encodes as nil too)                         |
 * | bool             | `boolean`                                                       |
 * | int / uint       | `number` when it is a safe integer, else `bigint`               |
 * | float 32 / 64    | `number` (a non-integer `number` encodes as float 64)           |
 * | str              | `string`                                                        |
 * | bin              | `Uint8Array`                                                    |
 * | array            | `Array`                                                         |
 * | map              | a plain object when every key is a string, else a `Map`         |
 *
 * @module
 */

/** A decoded MessagePack value. */
export type Value =
  | null
  | boolean
  | number
  | bigint
  | string
  | Uint8Array
  | Value[]
  | { [key: string]: Value }
  | Map<Value, Value>;

/**
 * How deeply arrays and maps may nest in a decoded value: a payload comes from a client or
 * another entity, and unbounded recursion on it would exhaust the guest's stack.
 */
export const DECODE_DEPTH_MAX = 256;

const I64_MIN = -(2n ** 63n);
const U64_MAX = 2n ** 64n - 1n;

/** Raised when bytes are not MessagePack this codec reads, or a value cannot be encoded. */
export class CodecError extends Error {}

/**
 * Encodes a value as MessagePack.
 *
 * ```ts
 * encode({ Add: 5 }); // Uint8Array [0x81, 0xa3, 0x41, 0x64, 0x64, 0x05]
 * ```
 */
export function encode(value: unknown): Uint8Array {
  const writer = new Writer();
  writer.value(value, 0);
  return writer.finish();
}

/**
 * Decodes one MessagePack value that fills `bytes` exactly.
 *
 * ```ts
 * decode(new Uint8Array([0xa3, 0x47, 0x65, 0x74])); // "Get"
 * ```
 */
export function decode(bytes: Uint8Array): Value {
  const reader = new Reader(bytes);
  const value = reader.value(0);
  if (reader.offset !== bytes.length) {
    throw new CodecError(`${bytes.length - reader.offset} trailing bytes after the value`);
  }
  return value;
}

class Writer {
  private buffer = new Uint8Array(64);
  private view = new DataView(this.buffer.buffer);
  private length = 0;

  finish(): Uint8Array {
    return this.buffer.slice(0, this.length);
  }

  value(value: unknown, depth: number): void {
    if (depth > DECODE_DEPTH_MAX) {
      throw new CodecError(`a value nests deeper than ${DECODE_DEPTH_MAX}`);
    }
    if (value === null || value === undefined) {
      this.byte(0xc0);
    } else if (typeof value === "boolean") {
      this.byte(value ? 0xc3 : 0xc2);
    } else if (typeof value === "number") {
      if (Number.isInteger(value)) {
        this.integer(BigInt(value));
      } else {
        this.byte(0xcb);
        this.reserve(8);
        this.view.setFloat64(this.length, value);
        this.length += 8;
      }
    } else if (typeof value === "bigint") {
      this.integer(value);
    } else if (typeof value === "string") {
      const utf8 = new TextEncoder().encode(value);
      this.header(utf8.length, 0xa0, 32, 0xd9, 0xda, 0xdb);
      this.bytes(utf8);
    } else if (value instanceof Uint8Array) {
      this.header(value.length, -1, 0, 0xc4, 0xc5, 0xc6);
      this.bytes(value);
    } else if (Array.isArray(value)) {
      this.header(value.length, 0x90, 16, -1, 0xdc, 0xdd);
      for (const item of value) this.value(item, depth + 1);
    } else if (value instanceof Map) {
      this.header(value.size, 0x80, 16, -1, 0xde, 0xdf);
      for (const [key, item] of value) {
        this.value(key, depth + 1);
        this.value(item, depth + 1);
      }
    } else if (typeof value === "object") {
      const entries = Object.entries(value);
      this.header(entries.length, 0x80, 16, -1, 0xde, 0xdf);
      for (const [key, item] of entries) {
        this.value(key, depth + 1);
        this.value(item, depth + 1);
      }
    } else {
      throw new CodecError(`a ${typeof value} cannot be encoded as MessagePack`);
    }
  }

  /** The smallest form, as rmp's `write_sint`/`write_uint` choose it. */
  private integer(value: bigint): void {
    if (value < I64_MIN || value > U64_MAX) {
      throw new CodecError(`${value} is outside the 64-bit integers`);
    }
    if (value >= 0n) {
      if (value < 128n) this.byte(Number(value));
      else if (value < 256n) this.fixed(0xcc, 1, value);
      else if (value < 65536n) this.fixed(0xcd, 2, value);
      else if (value < 4294967296n) this.fixed(0xce, 4, value);
      else this.fixed(0xcf, 8, value);
    } else if (value >= -32n) {
      this.byte(Number(value) & 0xff);
    } else if (value >= -128n) {
      this.fixed(0xd0, 1, value);
    } else if (value >= -32768n) {
      this.fixed(0xd1, 2, value);
    } else if (value >= -2147483648n) {
      this.fixed(0xd2, 4, value);
    } else {
      this.fixed(0xd3, 8, value);
    }
  }

  /** A marker and a big-endian two's-complement integer of `width` bytes. */
  private fixed(marker: number, width: number, value: bigint): void {
    this.byte(marker);
    this.reserve(width);
    const unsigned = BigInt.asUintN(width * 8, value);
    for (let index = 0; index < width; index += 1) {
      const shift = BigInt((width - 1 - index) * 8);
      this.buffer[this.length + index] = Number((unsigned >> shift) & 0xffn);
    }
    this.length += width;
  }

  /** A length header: a fix form below `fixLimit` (when `fix` >= 0), else 8/16/32-bit. */
  private header(
    length: number,
    fix: number,
    fixLimit: number,
    marker8: number,
    marker16: number,
    marker32: number,
  ): void {
    if (fix >= 0 && length < fixLimit) this.byte(fix | length);
    else if (marker8 >= 0 && length < 256) this.fixed(marker8, 1, BigInt(length));
    else if (length < 65536) this.fixed(marker16, 2, BigInt(length));
    else this.fixed(marker32, 4, BigInt(length));
  }

  private byte(value: number): void {
    this.reserve(1);
    this.buffer[this.length] = value;
    this.length += 1;
  }

  private bytes(value: Uint8Array): void {
    this.reserve(value.length);
    this.buffer.set(value, this.length);
    this.length += value.length;
  }

  private reserve(extra: number): void {
    if (this.length + extra <= this.buffer.length) return;
    let capacity = this.buffer.length * 2;
    while (capacity < this.length + extra) capacity *= 2;
    const grown = new Uint8Array(capacity);
    grown.set(this.buffer.subarray(0, this.length));
    this.buffer = grown;
    this.view = new DataView(grown.buffer);
  }
}

class Reader {
  offset = 0;
  private readonly view: DataView;

  constructor(private readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  value(depth: number): Value {
    if (depth > DECODE_DEPTH_MAX) {
      throw new CodecError(`the value nests deeper than ${DECODE_DEPTH_MAX}`);
    }
    const marker = this.unsigned(1);
    if (marker < 0x80) return marker;
    if (marker >= 0xe0) return marker - 0x100;
    if (marker >= 0xa0 && marker < 0xc0) return this.string(marker & 0x1f);
    if (marker >= 0x90 && marker < 0xa0) return this.array(marker & 0x0f, depth);
    if (marker >= 0x80 && marker < 0x90) return this.map(marker & 0x0f, depth);
    switch (marker) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
      case 0xc5:
      case 0xc6:
        return this.take(this.unsigned(1 << (marker - 0xc4))).slice();
      case 0xca:
        return this.view.getFloat32(this.advance(4));
      case 0xcb:
        return this.view.getFloat64(this.advance(8));
      case 0xcc:
      case 0xcd:
      case 0xce:
      case 0xcf:
        return narrow(this.big(1 << (marker - 0xcc), false));
      case 0xd0:
      case 0xd1:
      case 0xd2:
      case 0xd3:
        return narrow(this.big(1 << (marker - 0xd0), true));
      case 0xd9:
      case 0xda:
      case 0xdb:
        return this.string(this.unsigned(1 << (marker - 0xd9)));
      case 0xdc:
      case 0xdd:
        return this.array(this.unsigned(2 << (marker - 0xdc)), depth);
      case 0xde:
      case 0xdf:
        return this.map(this.unsigned(2 << (marker - 0xde)), depth);
      default:
        throw new CodecError(`unsupported MessagePack marker 0x${marker.toString(16)}`);
    }
  }

  private string(length: number): string {
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(this.take(length));
    } catch {
      throw new CodecError("a string is not valid UTF-8");
    }
  }

  private array(length: number, depth: number): Value[] {
    this.bound(length);
    const items: Value[] = [];
    for (let index = 0; index < length; index += 1) items.push(this.value(depth + 1));
    return items;
  }

  private map(length: number, depth: number): Value {
    this.bound(length);
    const entries: [Value, Value][] = [];
    for (let index = 0; index < length; index += 1) {
      entries.push([this.value(depth + 1), this.value(depth + 1)]);
    }
    if (entries.every(([key]) => typeof key === "string")) {
      const object: { [key: string]: Value } = {};
      for (const [key, item] of entries) {
        Object.defineProperty(object, key as string, {
          value: item,
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return object;
    }
    return new Map(entries);
  }

  /** A declared count cannot exceed the bytes left (each item is at least one byte). */
  private bound(length: number): void {
    if (length > this.bytes.length - this.offset) {
      throw new CodecError(`a count of ${length} runs past the end of the bytes`);
    }
  }

  private unsigned(width: number): number {
    return Number(this.big(width, false));
  }

  private big(width: number, signed: boolean): bigint {
    const bytes = this.take(width);
    let value = 0n;
    for (const byte of bytes) value = (value << 8n) | BigInt(byte);
    return signed ? BigInt.asIntN(width * 8, value) : value;
  }

  private take(length: number): Uint8Array {
    const start = this.advance(length);
    return this.bytes.subarray(start, start + length);
  }

  private advance(length: number): number {
    if (this.offset + length > this.bytes.length) {
      throw new CodecError("the bytes end in the middle of a value");
    }
    const start = this.offset;
    this.offset += length;
    return start;
  }
}

function narrow(value: bigint): number | bigint {
  const number = Number(value);
  return Number.isSafeInteger(number) ? number : value;
}
