// The entity model on the in-memory host: atomic writes per message, errors by kind, an
// instance rebuilt from state after a restart or an unexpected exception, tells, reminders.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Ctx } from "../src/ctx.js";
import { type Decoded, int64, unit, variants } from "../src/decode.js";
import type { EntityType } from "../src/runtime.js";
import { Harness } from "../src/testing.js";
import { EntityError, address } from "../src/types.js";

const Msg = variants({ Add: int64, Get: unit, Boom: unit, Throw: unit, Notify: unit, Remind: unit });

class Counter {
  constructor(public value: bigint) {}
  handle(ctx: Ctx, msg: Decoded<typeof Msg>): bigint {
    switch (msg.tag) {
      case "Add":
        this.value += msg.value;
        ctx.put("value", this.value);
        if (this.value > 100n) throw EntityError.rejected("over 100");
        break;
      case "Boom":
        ctx.put("value", -1n);
        this.value = -1n;
        throw new TypeError("unexpected");
      case "Throw":
        ctx.put("value", 0n);
        throw EntityError.failed("store down");
      case "Notify":
        ctx.tell(address("audit", "a"), { Saw: this.value });
        break;
      case "Remind":
        ctx.schedule(5000, "Get");
        ctx.info(`sender ${ctx.sender.kind}`);
        break;
    }
    return this.value;
  }
}

const counter: EntityType<Decoded<typeof Msg>, bigint> = {
  message: Msg,
  activate: (ctx) => new Counter(ctx.get("value", int64) ?? 0n),
};

test("replies, atomic writes and error kinds", () => {
  const harness = new Harness(counter, address("counter", "c"));
  assert.deepEqual(harness.send({ Add: 5 }), { ok: 5 });
  assert.equal(harness.state("value"), 5);
  const rejected = harness.send({ Add: 200 });
  assert.ok("err" in rejected && rejected.err.kind === "rejected");
  assert.equal(harness.state("value"), 5, "a rejected message keeps no write");
  const failed = harness.send("Throw");
  assert.ok("err" in failed && failed.err.kind === "failed" && failed.err.reason === "store down");
  const bad = harness.send("Explode");
  assert.ok("err" in bad && bad.err.kind === "bad-message");
  assert.match(bad.err.reason, /unknown variant `Explode`/);
});

test("an unexpected exception drops the instance, which comes back from state", () => {
  const harness = new Harness(counter, address("counter", "c"));
  harness.send({ Add: 7 });
  const boom = harness.send("Boom");
  assert.ok("err" in boom && boom.err.kind === "failed");
  // The in-memory -1 was discarded with the instance: the next message rebuilds from state.
  assert.deepEqual(harness.send("Get"), { ok: 7 });
});

test("state survives a restart; tells and reminders are committed with the message", () => {
  const harness = new Harness(counter, address("counter", "c"));
  harness.send({ Add: 3 });
  harness.restart();
  assert.deepEqual(harness.send("Get"), { ok: 3 });
  harness.send("Notify");
  assert.deepEqual(harness.host.tells, [{ to: address("audit", "a"), payload: { Saw: 3 } }]);
  harness.send("Remind", { kind: "reminder", timer: 9n });
  assert.equal(harness.host.schedules.length, 1);
  assert.equal(harness.host.schedules[0]?.delayMs, 5000n);
  assert.deepEqual(harness.host.logs.at(-1), ["info", "sender reminder"]);
});
