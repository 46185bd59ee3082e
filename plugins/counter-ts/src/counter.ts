// A durable counter, the Rust `plugins/counter`'s twin: `{"Add": n}` adds `n` and replies with
// the new value, `"Get"` replies with the value, `"Reset"` sets it to 0 and replies 0. Values
// are i64; an `Add` that would overflow is rejected. The value lives in durable state under the
// key "value", encoded as the Rust counter encodes it, so either can read the other's state.
import {
  type Ctx,
  type Decoded,
  EntityError,
  type EntityType,
  exportEntity,
  int64,
  unit,
  variants,
} from "@tessera/sdk";

/** The state key holding the value (an i64; absent means 0). */
const VALUE_KEY = "value";

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

/** What the counter understands. */
const Msg = variants({ Add: int64, Get: unit, Reset: unit });
type Msg = Decoded<typeof Msg>;

/** The in-memory copy of the counter, rebuilt from state on activation. */
class Counter {
  constructor(private value: bigint) {}

  handle(ctx: Ctx, msg: Msg): bigint {
    switch (msg.tag) {
      case "Get":
        break;
      case "Add": {
        const value = this.value + msg.value;
        if (value < I64_MIN || value > I64_MAX) {
          throw EntityError.rejected(`${this.value} + ${msg.value} overflows an i64`);
        }
        ctx.put(VALUE_KEY, value);
        this.value = value;
        break;
      }
      case "Reset":
        ctx.delete(VALUE_KEY);
        this.value = 0n;
        break;
    }
    return this.value;
  }
}

/** The entity type: its messages, and an instance from durable state. */
export const counter: EntityType<Msg, bigint> = {
  message: Msg,
  activate: (ctx) => new Counter(ctx.get(VALUE_KEY, int64) ?? 0n),
};

/** The component's `tessera:entity/handler` export. */
export const handler = exportEntity(counter);
