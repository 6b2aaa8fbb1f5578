//! nginx serving static files: the reference for "as fast as serving the same bytes can be".
//!
//! nginx (Debian's `nginx-light`) runs as a child process with a generated minimal config on a
//! free loopback port, serving files the bench writes into its own temporary directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::TempDir;

/// Where nginx is, if it is installed.
pub fn find() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
}

/// Install Debian's nginx-light (only on `--install-nginx`).
pub fn install() -> Result<PathBuf, String> {
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !apt(&["install", "-y", "nginx-light"]) {
        // The package lists may be missing or stale.
        apt(&["update"]);
        if !apt(&["install", "-y", "nginx-light"]) {
            return Err("apt-get install -y nginx-light failed".into());
        }
    }
    find().ok_or_else(|| "nginx-light installed but no nginx binary found".into())
}

/// How nginx runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `master_process off`: one process serving everything (`worker_processes` has no effect
    /// then). The configuration the targets prescribe.
    Single,
    /// A master and this many worker processes.
    Workers(usize),
}

/// How nginx sends a file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sending {
    /// `sendfile on`: the file's page-cache pages go to the socket without a copy in user space,
    /// which no server of bytes held in its own memory can do. The configuration the targets
    /// compare with.
    Sendfile,
    /// `sendfile off`: nginx reads the file into its buffers and writes them, two copies of
    /// every byte as kcache makes (into a body chunk, then into the socket): the reference for
    /// what serving bytes from a process's memory costs.
    Copying,
}

/// A running nginx; stopped on drop.
pub struct Nginx {
    child: Child,
    pub addr: SocketAddr,
    dir: TempDir,
    binary: PathBuf,
    mode: Mode,
    /// Worker processes (master mode), found after the start.
    workers: Vec<u32>,
}

impl Nginx {
    /// Start `binary` serving the files of a fresh temporary directory (add them with
    /// [`Nginx::put`]; nginx reads files per request, so they may come after the start).
    pub async fn start(binary: &Path) -> Result<Nginx, String> {
        Self::start_mode(binary, Mode::Single).await
    }

    pub async fn start_mode(binary: &Path, mode: Mode) -> Result<Nginx, String> {
        Self::start_with(binary, mode, None).await
    }

    /// [`Nginx::start_mode`], sending the file's bytes as `sending` says.
    pub async fn start_sending(
        binary: &Path,
        mode: Mode,
        sending: Sending,
    ) -> Result<Nginx, String> {
        Self::start_conf(binary, mode, None, sending, None).await
    }

    /// [`Nginx::start_mode`], serving HTTPS with `tls` (certificate and key PEM files) if given.
    pub async fn start_with(
        binary: &Path,
        mode: Mode,
        tls: Option<(&Path, &Path)>,
    ) -> Result<Nginx, String> {
        Self::start_conf(binary, mode, tls, Sending::Sendfile, None).await
    }

    /// One nginx process passing every request to `upstream` over kept-alive HTTP/1.1
    /// connections, streaming the answers unbuffered: what a hop costs when it only forwards.
    pub async fn start_proxy(binary: &Path, upstream: SocketAddr) -> Result<Nginx, String> {
        Self::start_conf(
            binary,
            Mode::Single,
            None,
            Sending::Sendfile,
            Some(upstream),
        )
        .await
    }

    async fn start_conf(
        binary: &Path,
        mode: Mode,
        tls: Option<(&Path, &Path)>,
        sending: Sending,
        proxy_to: Option<SocketAddr>,
    ) -> Result<Nginx, String> {
        let dir = TempDir::new("nginx")?;
        let root = dir.path().join("www");
        std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
        let port = super::free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let d = dir.path().display();
        let processes = match mode {
            Mode::Single => "master_process off;\nworker_processes 2;".to_string(),
            Mode::Workers(n) => format!("master_process on;\nworker_processes {n};"),
        };
        let conf = format!(
            "daemon off;\n{processes}\nerror_log {d}/e.log;\npid {d}/n.pid;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  sendfile {sendfile};\n  tcp_nopush on;\n  keepalive_requests 1000000;\n\
             \x20 default_type application/json;\n  client_body_temp_path {d}/tmp;\n\
             \x20 server {{\n    listen 127.0.0.1:{port};\n    location / {{ root {root}; }}\n  }}\n}}\n",
            root = root.display(),
            sendfile = match sending {
                Sending::Sendfile => "on",
                Sending::Copying => "off",
            }
        );
        let conf = match proxy_to {
            None => conf,
            Some(up) => conf
                .replace(
                    "  server {",
                    &format!("  upstream up {{ server {up}; keepalive 64; }}\n  server {{"),
                )
                .replace(
                    &format!("location / {{ root {}; }}", root.display()),
                    "location / { proxy_pass http://up; proxy_http_version 1.1; \
                     proxy_set_header Connection \"\"; proxy_buffering off; }",
                ),
        };
        // With workers, `reuseport` gives each its own accept queue so the connections spread.
        let conf = match mode {
            Mode::Single => conf,
            Mode::Workers(_) => conf.replace(
                &format!("listen 127.0.0.1:{port};"),
                &format!("listen 127.0.0.1:{port} reuseport;"),
            ),
        };
        // HTTPS with the protocol versions kcache serves (TLS 1.2 and 1.3).
        let conf = match tls {
            None => conf,
            Some((cert, key)) => conf.replace(
                &format!("listen 127.0.0.1:{port}"),
                &format!(
                    "ssl_certificate {};\n    ssl_certificate_key {};\n    ssl_protocols TLSv1.2 TLSv1.3;\n    listen 127.0.0.1:{port} ssl",
                    cert.display(),
                    key.display()
                ),
            ),
        };
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
        let child = Command::new(binary)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("e.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        let mut n = Nginx {
            child,
            addr,
            dir,
            binary: binary.to_path_buf(),
            mode,
            workers: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                if let Mode::Workers(w) = mode {
                    // Bounded: the workers are forked right after the listener opens.
                    for _ in 0..100 {
                        n.workers = super::procstat::children(n.child.id());
                        if n.workers.len() >= w {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                return Ok(n);
            }
            if let Ok(Some(status)) = n.child.try_wait() {
                let log = std::fs::read_to_string(n.dir.path().join("e.log")).unwrap_or_default();
                return Err(format!("nginx exited ({status}): {}", log.trim()));
            }
            if Instant::now() >= deadline {
                return Err("nginx did not start listening within 10 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Write a file to serve at `/NAME`.
    pub fn put(&self, name: &str, bytes: &[u8]) -> Result<String, String> {
        let path = self.dir.path().join("www").join(name);
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(format!("/{name}"))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every nginx process (the master and its workers), for CPU accounting.
    pub fn pids(&self) -> Vec<u32> {
        let mut p = vec![self.child.id()];
        p.extend(&self.workers);
        p
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if let Mode::Workers(_) = self.mode {
            // The master stops its workers on `-s stop` (TERM through the pid file).
            let _ = Command::new(&self.binary)
                .arg("-p")
                .arg(self.dir.path())
                .arg("-c")
                .arg(self.dir.path().join("nginx.conf"))
                .args(["-s", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // Did not stop: end the workers we started, by their ids, then the master.
            for w in &self.workers {
                let _ = Command::new("kill")
                    .args(["-KILL", &w.to_string()])
                    .status();
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
