// The codec against the bytes the Rust SDK's rmp-serde writes (guest-sdk/src/codec.rs), and the
// decoders' answers to shapes a client may send.
import assert from "node:assert/strict";
import { test } from "node:test";
import { CodecError, DECODE_DEPTH_MAX, decode, encode } from "../src/msgpack.js";
import { EntityError } from "../src/types.js";
import { int64, struct, string, uint64, unit, variants } from "../src/decode.js";

const bytes = (...values: number[]) => new Uint8Array(values);
const text = (value: string) => [...new TextEncoder().encode(value)];

test("client shapes encode as rmp-serde writes them", () => {
  assert.deepEqual(encode({ Add: 5 }), bytes(0x81, 0xa3, ...text("Add"), 0x05));
  assert.deepEqual(encode("Get"), bytes(0xa3, ...text("Get")));
  assert.deepEqual(
    encode({ Transfer: { to: "bob", amount: 7 } }),
    bytes(0x81, 0xa8, ...text("Transfer"), 0x82, 0xa2, ...text("to"), 0xa3, ...text("bob"), 0xa6, ...text("amount"), 0x07),
  );
  assert.deepEqual(encode({ data: new Uint8Array([1, 2]) }), bytes(0x81, 0xa4, ...text("data"), 0xc4, 0x02, 0x01, 0x02));
});

test("integers take rmp's smallest form, and 64-bit values round-trip", () => {
  const cases: [number | bigint, number[]][] = [
    [0, [0x00]],
    [127, [0x7f]],
    [128, [0xcc, 0x80]],
    [256, [0xcd, 0x01, 0x00]],
    [65536, [0xce, 0x00, 0x01, 0x00, 0x00]],
    [-1, [0xff]],
    [-32, [0xe0]],
    [-33, [0xd0, 0xdf]],
    [-129, [0xd1, 0xff, 0x7f]],
    [-70000, [0xd2, 0xff, 0xfe, 0xee, 0x90]],
    [2n ** 63n - 1n, [0xcf, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]],
    [-(2n ** 63n), [0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0]],
  ];
  for (const [value, expected] of cases) {
    assert.deepEqual(encode(value), bytes(...expected), `encode ${value}`);
    const back = decode(bytes(...expected));
    assert.equal(BigInt(back as number | bigint), BigInt(value), `decode ${value}`);
  }
  assert.equal(typeof decode(encode(2n ** 60n)), "bigint");
  assert.equal(typeof decode(encode(2 ** 40)), "number");
  assert.throws(() => encode(2n ** 64n), CodecError);
});

test("floats, nil, booleans, arrays and non-string keys", () => {
  assert.deepEqual(encode(1.5), bytes(0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0));
  assert.equal(decode(bytes(0xca, 0x3f, 0xc0, 0, 0)), 1.5);
  assert.deepEqual(decode(encode([null, true, false, "x"])), [null, true, false, "x"]);
  assert.deepEqual(decode(bytes(0x81, 0x01, 0x02)), new Map([[1, 2]]));
  const long = "y".repeat(300);
  assert.equal(decode(encode(long)), long);
  assert.deepEqual(encode(long).subarray(0, 3), bytes(0xda, 0x01, 0x2c));
});

test("garbage does not decode", () => {
  assert.throws(() => decode(bytes(0xc1)), CodecError);
  assert.throws(() => decode(bytes(0xa4, 0x4e)), CodecError, "truncated string");
  assert.throws(() => decode(bytes(0xdd, 0xff, 0xff, 0xff, 0xff)), CodecError, "a count past the end");
  assert.throws(() => decode(bytes(0x01, 0x02)), CodecError, "trailing bytes");
  assert.throws(() => decode(bytes(0xa1, 0xff)), CodecError, "invalid UTF-8");
  const deep = new Uint8Array(DECODE_DEPTH_MAX + 2).fill(0x91);
  assert.throws(() => decode(deep), CodecError, "nesting past the bound");
});

test("decoders type serde's externally tagged enums and refuse other shapes", () => {
  const Msg = variants({ Add: int64, Get: unit, Transfer: struct({ to: string, amount: uint64 }) });
  assert.deepEqual(Msg({ Add: 5 }), { tag: "Add", value: 5n });
  assert.deepEqual(Msg("Get"), { tag: "Get" });
  assert.deepEqual(Msg({ Get: null }), { tag: "Get" });
  assert.deepEqual(Msg({ Transfer: { to: "bob", amount: 7 } }), { tag: "Transfer", value: { to: "bob", amount: 7n } });
  const refused = (value: unknown) => {
    assert.throws(() => Msg(value as never), (error: unknown) => error instanceof EntityError && error.kind === "bad-message", JSON.stringify(value));
  };
  refused("Explode");
  refused({ Add: "five" });
  refused({ Add: 1.5 });
  refused({ Add: 1, Get: null });
  refused([1, 2]);
  refused({ Transfer: { to: "bob" } });
  refused({ Transfer: { to: "bob", amount: -1 } });
});
