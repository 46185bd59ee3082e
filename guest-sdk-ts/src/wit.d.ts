/**
 * The host imports of `tessera:entity@0.2.0` (`wit/entity.wit`) as componentize-js binds them:
 * records and variants as objects, `u64` as `bigint`, `option` as `undefined`, and a
 * `result`'s `err` thrown as an exception whose `payload` is the error.
 */
declare module "tessera:entity/host@0.2.0" {
  export interface Address {
    entityType: string;
    id: string;
  }
  export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";
  export function selfAddress(): Address;
  export function get(key: string): Uint8Array | undefined;
  export function put(key: string, value: Uint8Array): void;
  export { del as delete };
  function del(key: string): void;
  export function tell(to: Address, payload: Uint8Array): void;
  export function ask(to: Address, payload: Uint8Array, timeoutMs: number): Uint8Array;
  export function schedule(delayMs: bigint, payload: Uint8Array): bigint;
  export function cancel(timer: bigint): void;
  export function passivate(): void;
  export function log(level: LogLevel, message: string): void;
  export function nowMs(): bigint;
}
