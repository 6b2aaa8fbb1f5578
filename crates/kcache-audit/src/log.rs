//! The log backend: events as JSON lines in a file (rotated, see `rotate`) or on standard
//! output, as the apiserver's `--audit-log-path` writes them.
//!
//! Writing a file blocks, so the backend is a thread of its own rather than a task on the
//! runtime's workers. While events come, it takes its shelf (the lines
//! [`crate::Auditor::record`] serialised) once a tick and writes what it took in one go; when
//! a tick brought nothing it waits to be told of the next line. A reader of the file
//! (`tail -f`, a log shipper) sees each event within about a tick, while a busy trail costs
//! a write(2) or two per tick and no wake-up per event.

use std::io::{self, BufWriter, Stdout, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::LogConfig;
use crate::shelf::{Shelf, Taken};
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

/// Where the lines go.
enum Sink {
    Stdout(BufWriter<Stdout>),
    File(RotatingFile),
}

impl Sink {
    fn write_lines(&mut self, lines: &Taken) -> io::Result<()> {
        match self {
            Sink::Stdout(out) => out.write_all(&lines.bytes),
            Sink::File(file) => file.write_lines(lines),
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
/// apiserver's) and start the thread that writes what `shelf` gathers.
pub(crate) fn start(
    settings: LogSettings,
    shelf: Arc<Shelf>,
    control: mpsc::Receiver<Item>,
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
        .spawn(move || run(sink, &shelf, control, &stats))
        .map_err(AuditError::Thread)?;
    Ok(())
}

/// How long the backend sleeps after writing before it takes its shelf again (see `run`): an
/// event reaches the file within about this much of being recorded.
const IDLE_TICK: Duration = Duration::from_millis(10);

/// Write what the shelf gathers until told to stop or every recorder is gone.
fn run(sink: Sink, shelf: &Shelf, mut control: mpsc::Receiver<Item>, stats: &AuditStats) {
    let mut writer = Writer {
        sink,
        spare: Vec::new(),
        health: Health::default(),
        stats: stats.backend(Backend::Log),
    };
    loop {
        let wrote = writer.write_shelf(shelf);
        let item = match control.try_recv() {
            Ok(item) => Some(item),
            Err(mpsc::error::TryRecvError::Empty) => {
                writer.flush();
                if wrote {
                    // Waiting to be told would have every first line after a take wake this
                    // thread: while events come, sleep a tick and take what came meanwhile.
                    std::thread::sleep(IDLE_TICK);
                    continue;
                }
                // A tick brought nothing: wait for the next line's `Ready`.
                control.blocking_recv()
            }
            Err(mpsc::error::TryRecvError::Disconnected) => None,
        };
        match item {
            Some(Item::Ready) => {}
            Some(Item::Flush(done)) => {
                writer.write_shelf(shelf);
                writer.flush();
                let _ = done.send(());
            }
            Some(Item::Shutdown(done)) => {
                // Nothing gets in after this: events recorded from now on are dropped and
                // counted. Those that got in before are written.
                let waiting = crate::close(shelf, &mut control, done);
                writer.write_shelf(shelf);
                writer.flush();
                for done in waiting {
                    let _ = done.send(());
                }
                return;
            }
            None => {
                // Every recorder is gone: write what they left.
                writer.write_shelf(shelf);
                writer.flush();
                return;
            }
        }
    }
}

/// The writing side: the sink, the buffer the shelf gets back, and what it counts and reports.
struct Writer<'a> {
    sink: Sink,
    spare: Vec<u8>,
    health: Health,
    stats: &'a BackendStats,
}

impl Writer<'_> {
    /// Take the shelf and write what it held; whether it held anything.
    fn write_shelf(&mut self, shelf: &Shelf) -> bool {
        let taken = shelf.take(std::mem::take(&mut self.spare));
        if taken.events == 0 {
            self.spare = taken.bytes;
            return false;
        }
        let count = taken.events as u64;
        let written = self.sink.write_lines(&taken);
        if written.is_ok() {
            self.stats.add_written(count);
        } else {
            self.stats.add_errors(count);
        }
        self.health.report(written, "writing events");
        self.spare = taken.bytes;
        true
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
