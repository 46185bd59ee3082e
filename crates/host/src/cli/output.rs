//! The CLI's results on stdout. A closed stdout (`tessera state counter/c1 | head -1`) is not an
//! error the user should see: the process stops quietly with status 0, the way Unix tools do,
//! instead of panicking as `println!` would. Other write errors are reported on stderr.

use std::io::Write;

/// Writes one line of the CLI's output to stdout; see the module docs for a closed pipe.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::output::write_line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes `line` and a newline to stdout and flushes it.
pub(crate) fn write_line(line: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(line)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(error) => {
            eprintln!("error: cannot write the output: {error}");
            std::process::exit(1);
        }
    }
}
