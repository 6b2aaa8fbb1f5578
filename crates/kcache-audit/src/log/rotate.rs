//! The audit log file and its rotation, as the apiserver rotates its own (it uses the Go
//! package lumberjack, whose documented behaviour this follows):
//! - when writing a line would take the file past its maximum size, the file is renamed to
//!   `<name>-<time of rotation, UTC, 2006-01-02T15-04-05.000><ext>` beside it (`audit.log`
//!   becomes `audit-2024-05-01T12-30-45.123.log`) and a new file is started under the
//!   original name;
//! - after each rotation, and when the file is first opened, rotated files beyond the newest
//!   `maxBackups` and those whose name's time is older than `maxAgeDays` are removed;
//! - a line longer than the maximum size is refused (it could never fit).
//!
//! One difference: two rotations in the same millisecond would give the second backup the
//! first one's name, and the rename would replace it. Here a backup's name is always later
//! than the one before it (the next millisecond if need be) and never one already taken, so
//! no backup is lost and names keep the order the backups were made in.
//!
//! The file is created readable by its owner only, and its directory if missing likewise,
//! as the apiserver creates its audit log: events name users and what they read.
//!
//! Only a regular file is rotated. A path naming anything else (`/dev/null`, a FIFO a log
//! shipper reads, a terminal) is written as it is, without a size limit and without backups:
//! renaming it aside would move a device away (as root, `/dev/null` would become a regular file
//! that every later reader of `/dev/null` reads back) and put a plain file in its place.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::shelf::Taken;

/// The audit log file being written, with what its rotation needs.
pub(crate) struct RotatingFile {
    path: PathBuf,
    max_size: u64,
    max_backups: u64,
    max_age: Option<Duration>,
    file: BufWriter<File>,
    /// Bytes in the file, including those still in the buffer.
    size: u64,
    /// The time in the newest backup's name: the next one's is later, so that names sort in
    /// the order the backups were made even when rotations come faster than the clock.
    last_backup: Option<SystemTime>,
    /// Whether the path is a regular file, the only kind that is rotated (see the module's
    /// docs).
    rotates: bool,
}

/// Lines are gathered up to this many bytes before a write(2).
const BUFFER_BYTES: usize = 64 * 1024;

impl RotatingFile {
    /// Open the file for appending, creating it (and its directory) if needed, and remove
    /// the backups past the limits.
    pub(crate) fn open(
        path: PathBuf,
        max_size: u64,
        max_backups: u64,
        max_age: Option<Duration>,
    ) -> io::Result<RotatingFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            create_private_dir(dir)?;
        }
        let file = open_private(&path, false)?;
        let metadata = file.metadata()?;
        let size = metadata.len();
        let rotates = metadata.file_type().is_file();
        let log = RotatingFile {
            path,
            max_size,
            max_backups,
            max_age,
            file: BufWriter::with_capacity(BUFFER_BYTES, file),
            size,
            last_backup: None,
            rotates,
        };
        if rotates {
            log.remove_old_backups(SystemTime::now());
        }
        Ok(log)
    }

    /// Append the lines taken off the shelf, rotating between two of them where the next
    /// would not fit. A failed line fails the rest.
    pub(crate) fn write_lines(&mut self, lines: &Taken) -> io::Result<()> {
        let len = lines.bytes.len() as u64;
        if !self.rotates || self.size + len <= self.max_size {
            self.file.write_all(&lines.bytes)?;
            self.size += len;
            return Ok(());
        }
        for line in lines.bytes.split_inclusive(|b| *b == b'\n') {
            self.write_line(line)?;
        }
        Ok(())
    }

    /// Append one line, rotating first if it would not fit.
    pub(crate) fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        if !self.rotates {
            return self.file.write_all(line);
        }
        let len = line.len() as u64;
        if len > self.max_size {
            return Err(io::Error::other(format!(
                "an event of {len} bytes exceeds the maximum file size of {} bytes",
                self.max_size
            )));
        }
        if self.size + len > self.max_size {
            self.rotate(SystemTime::now())?;
        }
        self.file.write_all(line)?;
        self.size += len;
        Ok(())
    }

    /// Hand what is buffered to the file.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }

    /// Move the file aside under a backup name and start a new one.
    fn rotate(&mut self, now: SystemTime) -> io::Result<()> {
        self.file.flush()?;
        let earliest = match self.last_backup {
            Some(last) => now.max(last + Duration::from_millis(1)),
            None => now,
        };
        let (time, backup) = free_backup_name(&self.path, earliest);
        match fs::rename(&self.path, &backup) {
            Ok(()) => {}
            // Removed by someone else: there is nothing to keep.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.file = BufWriter::with_capacity(BUFFER_BYTES, open_private(&self.path, true)?);
        self.size = 0;
        self.last_backup = Some(time);
        self.remove_old_backups(now);
        Ok(())
    }

    /// Remove the backups beyond the newest `max_backups` and those older than `max_age`.
    /// A failure is logged, not returned: the event being written is not at fault.
    fn remove_old_backups(&self, now: SystemTime) {
        if self.max_backups == 0 && self.max_age.is_none() {
            return;
        }
        let mut backups = match list_backups(&self.path) {
            Ok(backups) => backups,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "audit log: listing rotated files");
                return;
            }
        };
        // Newest first, by the time in the name.
        backups.sort_by_key(|(time, _)| std::cmp::Reverse(*time));
        let mut remove = Vec::new();
        if self.max_backups > 0 && backups.len() as u64 > self.max_backups {
            remove = backups.split_off(self.max_backups as usize);
        }
        if let Some(cutoff) = self.max_age.and_then(|age| now.checked_sub(age)) {
            remove.extend(backups.into_iter().filter(|(time, _)| *time < cutoff));
        }
        for (_, path) in remove {
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "audit log: removing a rotated file");
            }
        }
    }
}

/// The file's name without its extension, with the `-` a backup adds, and the extension
/// (from the last `.`, as Go's `filepath.Ext`; empty if none).
fn prefix_and_ext(path: &Path) -> (String, String) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name.rfind('.') {
        Some(dot) => (format!("{}-", &name[..dot]), name[dot..].to_owned()),
        None => (format!("{name}-"), String::new()),
    }
}

/// The name a backup made at `time` gets: `<prefix>-2006-01-02T15-04-05.000<ext>`.
pub(crate) fn backup_name(path: &Path, time: SystemTime) -> PathBuf {
    let (prefix, ext) = prefix_and_ext(path);
    let ts = jiff::Timestamp::try_from(time).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let t = jiff::tz::Offset::UTC.to_datetime(ts);
    let name = format!(
        "{prefix}{:04}-{:02}-{:02}T{:02}-{:02}-{:02}.{:03}{ext}",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.subsec_nanosecond() / 1_000_000,
    );
    path.with_file_name(name)
}

/// [`backup_name`] for `time`, or for the first later millisecond whose name is not taken
/// (a backup left by an earlier run); with the time used.
fn free_backup_name(path: &Path, time: SystemTime) -> (SystemTime, PathBuf) {
    let mut time = time;
    loop {
        let name = backup_name(path, time);
        if !name.exists() {
            return (time, name);
        }
        time += Duration::from_millis(1);
    }
}

/// The backups of the file at `path` in its directory, each with the time in its name.
/// Files whose name does not parse are not backups and are left alone.
fn list_backups(path: &Path) -> io::Result<Vec<(SystemTime, PathBuf)>> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let (prefix, ext) = prefix_and_ext(path);
    let mut backups = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(time) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix.as_str()))
            .and_then(|n| n.strip_suffix(ext.as_str()))
            .and_then(parse_backup_time)
        else {
            continue;
        };
        if entry.file_type()?.is_file() {
            backups.push((time, entry.path()));
        }
    }
    Ok(backups)
}

/// `2006-01-02T15-04-05.000` (UTC) to a time.
pub(crate) fn parse_backup_time(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 23 {
        return None;
    }
    let separators = [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b'-'),
        (16, b'-'),
        (19, b'.'),
    ];
    if separators.iter().any(|(i, c)| b[*i] != *c) {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<i32> {
        let digits = &s[from..to];
        digits
            .bytes()
            .all(|d| d.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let dt = jiff::civil::DateTime::new(
        i16::try_from(number(0, 4)?).ok()?,
        number(5, 7)? as i8,
        number(8, 10)? as i8,
        number(11, 13)? as i8,
        number(14, 16)? as i8,
        number(17, 19)? as i8,
        number(20, 23)? * 1_000_000,
    )
    .ok()?;
    let ts = jiff::tz::Offset::UTC.to_timestamp(dt).ok()?;
    Some(SystemTime::from(ts))
}

/// Open (append) or create (truncate) the log file, owner-only when created.
fn open_private(path: &Path, truncate: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true);
    if truncate {
        options.write(true).truncate(true);
    } else {
        options.append(true);
    }
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}
