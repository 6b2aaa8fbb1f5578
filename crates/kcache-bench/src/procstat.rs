//! CPU time and resident memory of a process, read from `/proc` (Linux only).
//!
//! CPU is `utime + stime` of `/proc/PID/stat` (all threads of the process), in clock ticks;
//! memory is `VmRSS` of `/proc/PID/status`.

use std::time::Instant;

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every Linux this runs on).
pub fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

/// The fields of a `/proc/.../stat` line after the command name, which may contain spaces and
/// parentheses (so they start after the last ')'): index 0 is the state (field 3 of the whole
/// line), 1 the parent, 11 utime, 12 stime, 16 nice.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace().collect())
}

/// CPU seconds (user + system) the process has used so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    stat_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// CPU seconds (user + system) the calling thread has used so far.
pub fn thread_cpu_seconds() -> Option<f64> {
    stat_cpu_seconds("/proc/thread-self/stat")
}

fn stat_cpu_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    let fields = stat_fields(&stat)?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / clock_ticks() as f64)
}

/// Resident set size in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The soft limit on open files of this process (children inherit it).
pub fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .trim_start_matches("Max open files")
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(u64::MAX);
    }
    soft.parse().ok()
}

/// The processes whose parent is `pid` (e.g. nginx's workers).
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| stat_fields(&s)?.get(1)?.parse::<u32>().ok())
                == Some(pid)
        })
        .collect()
}

/// CPU used by one or more processes over an interval: `start`, then `cores()` at the end.
#[derive(Debug, Clone)]
pub struct CpuMeter {
    pids: Vec<u32>,
    cpu: Vec<f64>,
    at: Instant,
}

impl CpuMeter {
    pub fn start(pid: u32) -> CpuMeter {
        Self::start_all(&[pid])
    }

    pub fn start_all(pids: &[u32]) -> CpuMeter {
        CpuMeter {
            pids: pids.to_vec(),
            cpu: pids
                .iter()
                .map(|&p| cpu_seconds(p).unwrap_or(0.0))
                .collect(),
            at: Instant::now(),
        }
    }

    /// (CPU seconds used since `start`, wall seconds since `start`).
    pub fn used(&self) -> (f64, f64) {
        let cpu: f64 = self
            .pids
            .iter()
            .zip(&self.cpu)
            .map(|(&p, &c0)| (cpu_seconds(p).unwrap_or(c0) - c0).max(0.0))
            .sum();
        (cpu, self.at.elapsed().as_secs_f64())
    }

    /// Average cores used since `start` (1.0 = one core busy all the time).
    pub fn cores(&self) -> f64 {
        let (cpu, wall) = self.used();
        if wall > 0.0 {
            cpu / wall
        } else {
            0.0
        }
    }
}

/// Machine-wide CPU seconds from `/proc/stat`: (user + system, nice). Interrupt and softirq
/// time is left out: loopback traffic is mostly softirq work on behalf of the bench and its
/// targets, which no process is charged with.
pub fn machine_cpu_seconds() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let t = clock_ticks() as f64;
    Some(((v.first()? + v.get(2)?) as f64 / t, *v.get(1)? as f64 / t))
}

/// CPU used by everything else on the machine while the bench measures: the machine's user and
/// system time minus this process's and the measured targets' (other users of a shared machine
/// show up here, so a disturbed measurement can be told from a clean one), and apart from it
/// the time of processes running at a lower priority (`nice`, e.g. background builds), which
/// mostly yield to the bench.
///
/// The machine counts the user time of a thread at a lower priority as `nice`, not `user`,
/// whichever process it belongs to: the niced threads of this process and of the targets
/// (kcache's background threads, a sim at the lowest priority) are taken out of `nice` and
/// left out of what is taken from `user + system`.
#[derive(Debug, Clone)]
pub struct OthersMeter {
    busy: f64,
    nice: f64,
    own: f64,
    /// This process and the targets: their niced threads' user time at the start.
    ours: Vec<u32>,
    ours_niced: f64,
    at: Instant,
}

impl OthersMeter {
    /// Starts measuring; `targets` are the processes whose CPU [`OthersMeter::cores`] is given.
    pub fn start(targets: &[u32]) -> OthersMeter {
        let (busy, nice) = machine_cpu_seconds().unwrap_or((0.0, 0.0));
        let mut ours = vec![std::process::id()];
        ours.extend_from_slice(targets);
        OthersMeter {
            busy,
            nice,
            own: cpu_seconds(std::process::id()).unwrap_or(0.0),
            ours_niced: ours.iter().map(|&p| niced_user_seconds(p)).sum(),
            ours,
            at: Instant::now(),
        }
    }

    /// Average cores used by others (at normal priority, at lower priority), given the CPU
    /// seconds the targets used meanwhile.
    pub fn cores(&self, targets_cpu_seconds: f64) -> (f64, f64) {
        let (busy, nice) = machine_cpu_seconds().unwrap_or((self.busy, self.nice));
        let own = cpu_seconds(std::process::id()).unwrap_or(self.own) - self.own;
        let ours_niced = (self
            .ours
            .iter()
            .map(|&p| niced_user_seconds(p))
            .sum::<f64>()
            - self.ours_niced)
            .max(0.0);
        let wall = self.at.elapsed().as_secs_f64();
        if wall > 0.0 {
            (
                ((busy - self.busy - (own + targets_cpu_seconds - ours_niced)) / wall).max(0.0),
                ((nice - self.nice - ours_niced) / wall).max(0.0),
            )
        } else {
            (0.0, 0.0)
        }
    }
}

/// User CPU seconds of a process's threads that run at a lower priority (nice above 0), from
/// `/proc/PID/task/*/stat` (threads that have ended are not counted).
pub fn niced_user_seconds(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    let ticks: u64 = tasks
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.ok()?.path().join("stat")).ok()?;
            let fields = stat_fields(&stat)?;
            let nice: i64 = fields.get(16)?.parse().ok()?;
            (nice > 0).then(|| fields.get(11)?.parse::<u64>().ok())?
        })
        .sum();
    ticks as f64 / clock_ticks() as f64
}

/// Established IPv4 TCP connections whose local port is `port`: (count, bytes waiting in
/// their kernel send queues). From `/proc/net/tcp`; memory the kernel holds for a server,
/// which its RSS does not show.
pub fn tcp_send_queues(port: u16) -> (usize, u64) {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let mut count = 0;
    let mut bytes = 0;
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(state), Some(queues)) = (f.get(1), f.get(3), f.get(4)) else {
            continue;
        };
        let local_port = local
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok());
        if local_port != Some(port) || *state != "01" {
            continue;
        }
        count += 1;
        bytes += queues
            .split(':')
            .next()
            .and_then(|q| u64::from_str_radix(q, 16).ok())
            .unwrap_or(0);
    }
    (count, bytes)
}

/// Tracks the highest RSS seen by repeated `sample` calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct RssPeak {
    pub peak: u64,
}

impl RssPeak {
    pub fn sample(&mut self, pid: u32) -> u64 {
        let now = rss_bytes(pid).unwrap_or(0);
        self.peak = self.peak.max(now);
        now
    }
}
