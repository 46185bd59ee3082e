// The counter on the SDK's in-memory host, as plugins/counter's Rust unit tests run it.
import assert from "node:assert/strict";
import { test } from "node:test";
import { address } from "@tessera/sdk";
import { Harness } from "@tessera/sdk/testing";
import { counter } from "./counter.js";

const I64_MAX = 2n ** 63n - 1n;
const fresh = () => new Harness(counter, address("counter", "c-1"));

test("add, get, reset", () => {
  const c = fresh();
  assert.deepEqual(c.send({ Add: 5 }), { ok: 5 });
  assert.deepEqual(c.send({ Add: -2 }), { ok: 3 });
  assert.deepEqual(c.send("Get"), { ok: 3 });
  assert.equal(c.state("value"), 3);
  assert.deepEqual(c.send("Reset"), { ok: 0 });
  assert.equal(c.state("value"), undefined);
  assert.deepEqual(c.send("Get"), { ok: 0 });
});

test("the value survives a restart", () => {
  const c = fresh();
  c.send({ Add: 41 });
  c.restart();
  assert.deepEqual(c.send({ Add: 1 }), { ok: 42 });
});

test("an overflow is rejected and the state is unchanged", () => {
  const c = fresh();
  c.send({ Add: I64_MAX });
  const overflow = c.send({ Add: 1 });
  assert.ok("err" in overflow && overflow.err.kind === "rejected");
  assert.equal(c.state("value"), I64_MAX);
});

test("an unknown message is a bad message", () => {
  const outcome = fresh().send("Explode");
  assert.ok("err" in outcome && outcome.err.kind === "bad-message");
});
