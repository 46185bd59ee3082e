//! A hand-written progress bar on stderr for large uploads: a reader that redraws one line as
//! bytes pass through it.

use std::io::{IsTerminal, Read, Write};

/// Uploads smaller than this get no bar: they finish before it could be read.
pub const PROGRESS_BYTES_MIN: u64 = 1 << 20;

/// Width of the bar in characters.
const BAR_WIDTH: u64 = 30;

/// Wraps a reader and draws `[#####-----] 45% 12.3/27.0 MiB` on stderr as it is read.
pub struct ProgressReader<R> {
    inner: R,
    total: u64,
    read: u64,
    drawn_percent: Option<u64>,
    visible: bool,
}

impl<R: Read> ProgressReader<R> {
    /// A reader of `total` bytes; the bar shows only on a terminal and for large uploads.
    pub fn new(inner: R, total: u64) -> Self {
        ProgressReader {
            inner,
            total,
            read: 0,
            drawn_percent: None,
            visible: total >= PROGRESS_BYTES_MIN && std::io::stderr().is_terminal(),
        }
    }

    fn draw(&mut self) {
        let percent = (self.read * 100).checked_div(self.total).unwrap_or(100);
        if self.drawn_percent == Some(percent) {
            return;
        }
        self.drawn_percent = Some(percent);
        let filled = (percent * BAR_WIDTH / 100) as usize;
        let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
        let mut stderr = std::io::stderr().lock();
        let _ = write!(
            stderr,
            "\r[{}{}] {percent:>3}% {:.1}/{:.1} MiB",
            "#".repeat(filled),
            "-".repeat(BAR_WIDTH as usize - filled),
            mib(self.read),
            mib(self.total)
        );
        if self.read >= self.total {
            let _ = writeln!(stderr);
        }
        let _ = stderr.flush();
    }
}

impl<R: Read> Read for ProgressReader<R> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let count = self.inner.read(buffer)?;
        self.read += count as u64;
        if self.visible {
            self.draw();
        }
        Ok(count)
    }
}
