//! Guest stdout and stderr, turned into host log lines tagged with the entity address, with a
//! per-message line budget so a noisy guest cannot flood the host log.
//!
//! The stream is synchronous: a write is split into lines and logged (or counted as dropped)
//! in the guest's own call, with no background writer task, so a guest call writes its logs on
//! whichever thread runs it, without a hop per write.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

/// The longest guest log line kept; the rest of a longer line is cut off.
pub const GUEST_LOG_LINE_BYTES_MAX: usize = 1024;

/// How many more guest lines may be logged during the current message.
#[derive(Debug, Default)]
pub(crate) struct LogBudget {
    lines_remaining: AtomicU32,
    dropped: AtomicU64,
}

impl LogBudget {
    pub(crate) fn reset(&self, lines: u32) {
        self.lines_remaining.store(lines, Ordering::Relaxed);
    }

    /// Takes one line from the budget; false (and a drop counted) when it is spent.
    pub(crate) fn take(&self) -> bool {
        let taken = self
            .lines_remaining
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(1)
            })
            .is_ok();
        if !taken {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Lines dropped over the instance's life.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// One of a guest's output streams.
#[derive(Clone)]
pub(crate) struct GuestOutput {
    pub(crate) entity: Arc<str>,
    pub(crate) stream: &'static str,
    pub(crate) budget: Arc<LogBudget>,
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.writer())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.writer())
    }
}

impl GuestOutput {
    fn writer(&self) -> GuestLineWriter {
        GuestLineWriter {
            output: self.clone(),
            line: Vec::new(),
        }
    }
}

struct GuestLineWriter {
    output: GuestOutput,
    line: Vec<u8>,
}

impl GuestLineWriter {
    fn emit(&mut self) {
        if self.output.budget.take() {
            let text = String::from_utf8_lossy(&self.line);
            tracing::info!(
                target: "tessera::guest",
                entity = %self.output.entity,
                stream = self.output.stream,
                "{text}"
            );
        }
        self.line.clear();
    }

    fn take_bytes(&mut self, buffer: &[u8]) {
        for &byte in buffer {
            if byte == b'\n' {
                self.emit();
            } else if self.line.len() < GUEST_LOG_LINE_BYTES_MAX {
                self.line.push(byte);
            }
        }
    }
}

impl Drop for GuestLineWriter {
    /// A last line without its newline is logged when the stream goes.
    fn drop(&mut self) {
        if !self.line.is_empty() {
            self.emit();
        }
    }
}

/// The most bytes a guest may hand over in one write (what `check-write` grants).
const WRITE_BYTES_MAX: usize = 64 * 1024;

impl OutputStream for GuestLineWriter {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        if bytes.len() > WRITE_BYTES_MAX {
            return Err(StreamError::Trap(wasmtime::Error::msg(format!(
                "a guest log write of {} bytes is over the {WRITE_BYTES_MAX} granted",
                bytes.len()
            ))));
        }
        self.take_bytes(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_BYTES_MAX)
    }
}

impl Pollable for GuestLineWriter {
    /// Always ready: writes never wait.
    fn ready<'a, 'b>(&'a mut self) -> Pin<Box<dyn std::future::Future<Output = ()> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(std::future::ready(()))
    }
}

impl AsyncWrite for GuestLineWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _context: &mut Context<'_>,
        buffer: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().take_bytes(buffer);
        Poll::Ready(Ok(buffer.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _context: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        _context: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        let writer = self.get_mut();
        if !writer.line.is_empty() {
            writer.emit();
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_stops_at_its_limit_and_counts_drops() {
        let budget = LogBudget::default();
        budget.reset(2);
        assert!(budget.take());
        assert!(budget.take());
        assert!(!budget.take());
        assert!(!budget.take());
        assert_eq!(budget.dropped(), 2);
        budget.reset(1);
        assert!(budget.take());
    }
}
