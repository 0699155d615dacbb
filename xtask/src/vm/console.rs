//! A guest's console: its serial output (QEMU's stdout) and QEMU's own stderr, kept as a tail
//! for reports, logged to a file, shown with `--verbose`; and when the guest's command started.

use indicatif::MultiProgress;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// Lines of console kept for reports.
const TAIL_LINES: usize = 80;
/// What the guest's /init prints when it starts the command.
const RUNNING: &str = "xtask-init: running";

/// A guest's console, shared between the reader threads and the monitor loop.
#[derive(Debug, Clone, Default)]
pub(super) struct Console(Arc<Mutex<State>>);

#[derive(Debug, Default)]
struct State {
    tail: VecDeque<String>,
    running_at: Option<Instant>,
}

impl Console {
    /// Appends a line to the tail (dropping the oldest past [`TAIL_LINES`]).
    pub fn push(&self, line: String) {
        if let Ok(mut c) = self.0.lock() {
            if c.tail.len() >= TAIL_LINES {
                c.tail.pop_front();
            }
            c.tail.push_back(line);
        }
    }

    /// The last lines, joined.
    pub fn tail(&self) -> String {
        self.0
            .lock()
            .map(|c| c.tail.iter().cloned().collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }

    /// When the guest's command started (seen on the console), if it did.
    pub fn running_at(&self) -> Option<Instant> {
        self.0.lock().ok().and_then(|c| c.running_at)
    }

    /// Reads the serial console to its end on a thread: every line goes to `log` and the
    /// tail, and on screen (prefixed with `name`) when `verbose`.
    pub fn follow_serial(
        &self,
        out: impl Read + Send + 'static,
        mut log: impl Write + Send + 'static,
        mp: MultiProgress,
        name: String,
        verbose: bool,
    ) -> JoinHandle<()> {
        let console = self.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let _ = log.write_all(&buf);
                let line = String::from_utf8_lossy(&buf)
                    .trim_end_matches(['\r', '\n'])
                    .to_owned();
                if line.contains(RUNNING)
                    && let Ok(mut c) = console.0.lock()
                {
                    c.running_at.get_or_insert_with(Instant::now);
                }
                if verbose {
                    say(&mp, format!("[{name}] {line}"));
                }
                console.push(line);
            }
        })
    }

    /// Reads QEMU's own stderr (e.g. socket errors) on a thread: on screen, and into the tail.
    pub fn follow_stderr(
        &self,
        err: impl Read + Send + 'static,
        mp: MultiProgress,
        name: String,
    ) -> JoinHandle<()> {
        let console = self.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                say(&mp, format!("[{name} qemu] {line}"));
                console.push(format!("[qemu] {line}"));
            }
        })
    }
}

/// Prints above the spinners, or plainly when they are hidden (not a terminal).
fn say(mp: &MultiProgress, line: String) {
    if mp.is_hidden() {
        eprintln!("{line}");
    } else {
        let _ = mp.println(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::ProgressDrawTarget;

    #[test]
    fn the_tail_keeps_the_last_lines() {
        let c = Console::default();
        for i in 0..TAIL_LINES + 5 {
            c.push(format!("line {i}"));
        }
        let tail = c.tail();
        assert_eq!(tail.lines().count(), TAIL_LINES);
        assert!(
            tail.starts_with("line 5\n") && tail.ends_with(&format!("line {}", TAIL_LINES + 4))
        );
    }

    #[test]
    fn the_serial_console_is_logged_and_marks_the_start() {
        let c = Console::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        #[derive(Clone)]
        struct Log(Arc<Mutex<Vec<u8>>>);
        impl Write for Log {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mp = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let serial =
            std::io::Cursor::new(b"booting\r\nxtask-init: running /bin/true\nbye".to_vec());
        c.follow_serial(serial, Log(Arc::clone(&log)), mp, "A".into(), false)
            .join()
            .unwrap();
        assert!(c.running_at().is_some());
        assert_eq!(c.tail(), "booting\nxtask-init: running /bin/true\nbye");
        assert_eq!(
            log.lock().unwrap().as_slice(),
            b"booting\r\nxtask-init: running /bin/true\nbye"
        );
        let quiet = Console::default();
        quiet.push("booting".into());
        assert!(quiet.running_at().is_none());
    }
}
