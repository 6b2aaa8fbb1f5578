//! The log file's rotation, with sizes of a few lines: names, limits, what is kept.

use std::time::SystemTime;

use super::rotate::{backup_name, parse_backup_time, RotatingFile};
use crate::testing::{numbered_events, TempDir};
use crate::Level;

/// `n` event lines (each about 560 bytes, ending in a newline), audit IDs `id-0`… in order.
fn lines(n: usize) -> Vec<Vec<u8>> {
    numbered_events(Level::Metadata, n)
        .iter()
        .map(|e| {
            let mut line = Vec::new();
            e.write_json(&mut line);
            line.push(b'\n');
            line
        })
        .collect()
}

/// The files of `dir`, by name: (name, content).
fn files(dir: &TempDir) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            (name, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// The audit IDs of the lines of `content`, each line checked to be an event.
fn ids(content: &str) -> Vec<String> {
    content
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["kind"], "Event");
            v["auditID"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn rotation_names_backups_and_keeps_every_line() {
    let dir = TempDir::new("rotate");
    let path = dir.path().join("audit.log");
    let lines = lines(20);
    let max = 2 * lines[0].len() as u64 + 10;
    let mut log = RotatingFile::open(path.clone(), max, 0, None).unwrap();
    for line in &lines {
        log.write_line(line).unwrap();
    }
    log.flush().unwrap();
    let files = files(&dir);
    // Two lines a file: the current one and nine backups.
    assert_eq!(
        files.len(),
        10,
        "{:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    let mut all = Vec::new();
    for (name, content) in &files {
        assert!(content.len() as u64 <= max, "{name}");
        if name != "audit.log" {
            let time = name
                .strip_prefix("audit-")
                .and_then(|n| n.strip_suffix(".log"))
                .unwrap_or_else(|| panic!("{name}"));
            assert!(parse_backup_time(time).is_some(), "{name}");
            all.extend(ids(content));
        }
    }
    // Backups sort by name in the order they were made; the current file holds the newest.
    all.extend(ids(&files.iter().find(|f| f.0 == "audit.log").unwrap().1));
    let want: Vec<String> = (0..20).map(|i| format!("id-{i}")).collect();
    assert_eq!(all, want);
}

#[test]
fn max_backups_keeps_the_newest() {
    let dir = TempDir::new("backups");
    let path = dir.path().join("audit.log");
    let lines = lines(12);
    let max = lines[0].len() as u64 + 10;
    let mut log = RotatingFile::open(path, max, 2, None).unwrap();
    for line in &lines {
        log.write_line(line).unwrap();
    }
    log.flush().unwrap();
    let files = files(&dir);
    assert_eq!(files.len(), 3);
    let current = &files.iter().find(|f| f.0 == "audit.log").unwrap().1;
    assert_eq!(ids(current), ["id-11"]);
    // The backups, oldest name first, hold the two lines before it.
    let backups: Vec<String> = files
        .iter()
        .filter(|f| f.0 != "audit.log")
        .flat_map(|f| ids(&f.1))
        .collect();
    assert_eq!(backups, ["id-9", "id-10"]);
}

#[test]
fn max_age_removes_old_backups_and_nothing_else() {
    let dir = TempDir::new("age");
    let path = dir.path().join("audit.log");
    let now = SystemTime::now();
    let old = backup_name(&path, now - std::time::Duration::from_secs(3 * 24 * 3600));
    let recent = backup_name(&path, now - std::time::Duration::from_secs(3600));
    let unrelated = [
        "audit-notes.log",
        "other-2001-01-01T00-00-00.000.log",
        "audit-2001-01-01T00-00-00.000.txt",
    ];
    std::fs::write(&old, "old\n").unwrap();
    std::fs::write(&recent, "recent\n").unwrap();
    for name in unrelated {
        std::fs::write(dir.path().join(name), "x\n").unwrap();
    }
    // Cleaning happens when the file is opened, and again after each rotation.
    let _log = RotatingFile::open(
        path,
        1 << 20,
        0,
        Some(std::time::Duration::from_secs(24 * 3600)),
    )
    .unwrap();
    assert!(!old.exists());
    assert!(recent.exists());
    for name in unrelated {
        assert!(dir.path().join(name).exists(), "{name}");
    }
}

#[test]
fn an_existing_file_is_appended_to_and_counted() {
    let dir = TempDir::new("append");
    let path = dir.path().join("audit.log");
    let lines = lines(2);
    std::fs::write(&path, &lines[0]).unwrap();
    let max = 2 * lines[0].len() as u64 - 1;
    let mut log = RotatingFile::open(path.clone(), max, 0, None).unwrap();
    // The existing line counts toward the size: this one goes to a new file.
    log.write_line(&lines[1]).unwrap();
    log.flush().unwrap();
    assert_eq!(ids(&std::fs::read_to_string(&path).unwrap()), ["id-1"]);
    assert_eq!(files(&dir).len(), 2);

    let dir = TempDir::new("append-fits");
    let path = dir.path().join("audit.log");
    std::fs::write(&path, &lines[0]).unwrap();
    let mut log = RotatingFile::open(path.clone(), 1 << 20, 0, None).unwrap();
    log.write_line(&lines[1]).unwrap();
    log.flush().unwrap();
    assert_eq!(
        ids(&std::fs::read_to_string(&path).unwrap()),
        ["id-0", "id-1"]
    );
}

#[test]
fn a_line_longer_than_the_maximum_is_refused() {
    let dir = TempDir::new("long");
    let path = dir.path().join("audit.log");
    let mut log = RotatingFile::open(path.clone(), 10, 0, None).unwrap();
    let e = log.write_line(b"0123456789ab\n").unwrap_err();
    assert!(
        e.to_string().contains("exceeds the maximum file size"),
        "{e}"
    );
    log.write_line(b"short\n").unwrap();
    log.flush().unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "short\n");
}

#[test]
fn backup_names_are_lumberjacks() {
    let t = crate::testing::sample_time();
    let rows = [
        (
            "/var/log/audit.log",
            "/var/log/audit-2024-05-01T12-30-45.123.log",
        ),
        ("/var/log/audit", "/var/log/audit-2024-05-01T12-30-45.123"),
        ("audit.log.json", "audit.log-2024-05-01T12-30-45.123.json"),
    ];
    for (path, want) in rows {
        assert_eq!(
            backup_name(std::path::Path::new(path), t).to_str().unwrap(),
            want
        );
    }
    assert_eq!(
        parse_backup_time("2024-05-01T12-30-45.123"),
        Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_714_566_645_123))
    );
    for bad in [
        "2024-05-01T12-30-45",
        "2024-13-01T12-30-45.123",
        "2024-05-01T12:30:45.123",
        "notes",
    ] {
        assert_eq!(parse_backup_time(bad), None, "{bad}");
    }
}

/// Rotations within one millisecond take the next free name rather than replacing a
/// backup (lines are tiny here, so rotations come faster than the clock moves).
#[test]
fn quick_rotations_lose_no_backup() {
    let dir = TempDir::new("quick");
    let path = dir.path().join("audit.log");
    let mut log = RotatingFile::open(path, 8, 0, None).unwrap();
    for i in 0..50 {
        log.write_line(format!("line {i:02}\n").as_bytes()).unwrap();
    }
    log.flush().unwrap();
    let files = files(&dir);
    assert_eq!(files.len(), 50);
    let mut lines: Vec<&str> = files.iter().map(|f| f.1.trim_end()).collect();
    lines.sort();
    let want: Vec<String> = (0..50).map(|i| format!("line {i:02}")).collect();
    assert_eq!(lines, want);
}

#[cfg(unix)]
#[test]
fn the_file_and_its_directory_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = TempDir::new("private");
    let path = dir.path().join("logs/kcache/audit.log");
    let mut log = RotatingFile::open(path.clone(), 8, 0, None).unwrap();
    log.write_line(b"line 1\n").unwrap();
    log.write_line(b"line 2\n").unwrap();
    log.flush().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    let backups: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
    assert_eq!(backups.len(), 2);
    for b in backups {
        assert_eq!(mode(&b.unwrap().path()), 0o600);
    }
}

#[test]
fn settings_from_the_configuration() {
    let stdout = super::LogSettings::from_config(&crate::LogConfig {
        path: "-".into(),
        ..crate::LogConfig::default()
    });
    assert_eq!(stdout.path, None);
    assert_eq!(stdout.max_size_bytes, 100 << 20);
    assert_eq!(stdout.max_age, None);
    let file = super::LogSettings::from_config(&crate::LogConfig {
        path: "/var/log/kcache/audit.log".into(),
        max_size_mb: 5,
        max_backups: 3,
        max_age_days: 2,
    });
    assert_eq!(
        file.path.as_deref(),
        Some(std::path::Path::new("/var/log/kcache/audit.log"))
    );
    assert_eq!(file.max_size_bytes, 5 << 20);
    assert_eq!(file.max_backups, 3);
    assert_eq!(
        file.max_age,
        Some(std::time::Duration::from_secs(2 * 24 * 3600))
    );
}

/// A path that is not a regular file (here a FIFO, as a log shipper reads; `/dev/null` alike)
/// is written as it is: never renamed aside and replaced by a plain file, which as root would
/// have turned `/dev/null` into a file that every reader of `/dev/null` then reads back.
#[cfg(unix)]
#[test]
fn a_path_that_is_not_a_regular_file_is_never_rotated() {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;

    let dir = TempDir::new("rotate-fifo");
    let path = dir.path().join("audit.pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let reader = {
        let path = path.clone();
        // Opening a FIFO for reading waits for its writer, and reading ends when it closes.
        std::thread::spawn(move || {
            let mut all = String::new();
            std::fs::File::open(path)
                .unwrap()
                .read_to_string(&mut all)
                .unwrap();
            all
        })
    };
    let lines = lines(10);
    // Two lines would fill a regular file of this size: a regular file rotates four times.
    let max = 2 * lines[0].len() as u64 + 10;
    let mut log = RotatingFile::open(path.clone(), max, 1, None).unwrap();
    for line in &lines {
        log.write_line(line).unwrap();
    }
    log.flush().unwrap();
    drop(log);
    let read = reader.join().unwrap();
    let expected: Vec<String> = (0..10).map(|i| format!("id-{i}")).collect();
    assert_eq!(ids(&read), expected);
    assert!(std::fs::metadata(&path).unwrap().file_type().is_fifo());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["audit.pipe"]);
}
