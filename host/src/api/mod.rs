//! The HTTP edge of a node: JSON (or MessagePack) in and out, tokens, and the conversion
//! between the JSON clients write and the MessagePack entities read.

pub mod codec;
