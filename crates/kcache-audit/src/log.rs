//! The log backend: events as JSON lines in a file (rotated, see `rotate`) or on standard
//! output, as the apiserver's `--audit-log-path` writes them.
//!
//! Writing a file blocks, so the backend is a thread of its own rather than a task on the
//! runtime's workers. It writes each event's bytes (serialised by [`crate::Auditor::record`])
//! as one line through a `BufWriter`, which it flushes whenever its queue is empty: a reader of the file (`tail -f`,
//! a log shipper) sees each event within a few milliseconds, while a busy trail costs one
//! write(2) per buffer-full or per idle tick, and no wake-up per event.

use std::io::{self, BufWriter, Stdout, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::LogConfig;
use crate::stats::{AuditStats, Backend, BackendStats};
use crate::{AuditError, Item};

mod rotate;
#[cfg(test)]
mod tests;

use rotate::RotatingFile;

/// What the backend needs from the configuration, in the units it uses.
#[derive(Debug, Clone)]
pub(crate) struct LogSettings {
    /// The file, or `None` for standard output.
    pub(crate) path: Option<PathBuf>,
    pub(crate) max_size_bytes: u64,
    pub(crate) max_backups: u64,
    pub(crate) max_age: Option<Duration>,
}

impl LogSettings {
    pub(crate) fn from_config(config: &LogConfig) -> LogSettings {
        LogSettings {
            path: (!config.is_stdout()).then(|| config.path.clone()),
            max_size_bytes: config.max_size_bytes(),
            max_backups: config.max_backups,
            max_age: (config.max_age_days > 0)
                .then(|| Duration::from_secs(config.max_age_days.saturating_mul(24 * 60 * 60))),
        }
    }
}

/// A buffer that grew past this for one large event is given back rather than kept.
const LINE_KEEP_BYTES: usize = 1024 * 1024;

/// Where the lines go.
enum Sink {
    Stdout(BufWriter<Stdout>),
    File(RotatingFile),
}

impl Sink {
    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        match self {
            Sink::Stdout(out) => out.write_all(line),
            Sink::File(file) => file.write_line(line),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Stdout(out) => out.flush(),
            Sink::File(file) => file.flush(),
        }
    }
}

/// Open the file (an error here stops kcache's start, as a bad `--audit-log-path` stops the
/// apiserver's) and start the thread that writes what `queue` brings.
pub(crate) fn start(
    settings: LogSettings,
    queue: mpsc::Receiver<Item>,
    stats: Arc<AuditStats>,
) -> Result<(), AuditError> {
    // Opening happens once, before kcache serves anything: the only file IO off the thread.
    let sink = match settings.path {
        None => Sink::Stdout(BufWriter::new(io::stdout())),
        Some(path) => Sink::File(
            RotatingFile::open(
                path.clone(),
                settings.max_size_bytes,
                settings.max_backups,
                settings.max_age,
            )
            .map_err(|source| AuditError::OpenLog {
                path: path.display().to_string(),
                source,
            })?,
        ),
    };
    std::thread::Builder::new()
        .name("kcache-audit-log".into())
        .spawn(move || run(sink, queue, &stats))
        .map_err(AuditError::Thread)?;
    Ok(())
}

/// How long the backend sleeps when its queue is empty before it looks again (see `run`): an
/// event reaches the file within about this much of being recorded.
const IDLE_TICK: Duration = Duration::from_millis(10);

/// Write events until told to stop or every sender is gone.
fn run(sink: Sink, mut queue: mpsc::Receiver<Item>, stats: &AuditStats) {
    let mut writer = Writer {
        sink,
        line: Vec::with_capacity(4096),
        health: Health::default(),
        stats: stats.backend(Backend::Log),
    };
    loop {
        let item = match queue.try_recv() {
            Ok(item) => item,
            Err(mpsc::error::TryRecvError::Empty) => {
                writer.flush();
                // Waiting on the queue would have every event's sender wake this thread (a
                // futex call on each side, several µs of CPU an event at a high read rate):
                // first sleep a tick and take what came meanwhile in one go; park only once
                // a tick brought nothing.
                std::thread::sleep(IDLE_TICK);
                match queue.try_recv() {
                    Ok(item) => item,
                    Err(mpsc::error::TryRecvError::Empty) => match queue.blocking_recv() {
                        Some(item) => item,
                        None => break,
                    },
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                }
            }
            Err(mpsc::error::TryRecvError::Disconnected) => break,
        };
        match item {
            Item::Event(event) => writer.write(&event),
            Item::Flush(done) => {
                writer.flush();
                let _ = done.send(());
            }
            Item::Shutdown(done) => {
                // Nothing gets in after this: events recorded from now on are dropped and
                // counted. Those that got in before are written.
                queue.close();
                let mut waiting = vec![done];
                while let Ok(item) = queue.try_recv() {
                    match item {
                        Item::Event(event) => writer.write(&event),
                        Item::Flush(done) | Item::Shutdown(done) => waiting.push(done),
                    }
                }
                writer.flush();
                for done in waiting {
                    let _ = done.send(());
                }
                return;
            }
        }
    }
    writer.flush();
}

/// The writing side: the sink, the reused line buffer, and what it counts and reports.
struct Writer<'a> {
    sink: Sink,
    line: Vec<u8>,
    health: Health,
    stats: &'a BackendStats,
}

impl Writer<'_> {
    fn write(&mut self, event: &[u8]) {
        self.line.clear();
        self.line.extend_from_slice(event);
        self.line.push(b'\n');
        let written = self.sink.write_line(&self.line);
        if written.is_ok() {
            self.stats.add_written(1);
        } else {
            self.stats.add_errors(1);
        }
        self.health.report(written, "writing an event");
        if self.line.capacity() > LINE_KEEP_BYTES {
            self.line = Vec::with_capacity(4096);
        }
    }

    fn flush(&mut self) {
        let flushed = self.sink.flush();
        self.health.report(flushed, "flushing");
    }
}

/// Logs the first failure of a run of them and the recovery after it: a full disk must not
/// turn every event into a log line of its own.
#[derive(Default)]
struct Health {
    failing: bool,
}

impl Health {
    fn report(&mut self, result: io::Result<()>, what: &str) {
        match result {
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::info!("audit log: writing again");
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!(error = %e, "audit log: {what} failed; events are lost (counted as errors) until it works again");
            }
            Err(_) => {}
        }
    }
}
