//! Test support: `kcache sim` (the simulated apiserver) as a process of its own, for the tests
//! that run `kcache bench --kubeconfig` against it as against a real cluster.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `kcache sim` as a child process; killed on drop.
pub struct SimProcess {
    child: Child,
}

impl SimProcess {
    /// Start `kcache` (the binary at `exe`) as a sim seeded with `seed` (its `--configmaps`,
    /// `--pods`, … arguments) that writes its kubeconfig to `kubeconfig`, and wait for the
    /// line it prints once the kubeconfig is written and the server listens.
    pub fn start(exe: &str, kubeconfig: &Path, seed: &[&str]) -> SimProcess {
        let mut child = Command::new(exe)
            .args(["sim", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(kubeconfig)
            .args(seed)
            .env("KCACHE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kcache sim");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read kcache sim's first line");
        assert!(
            line.starts_with("simulated cluster at https://"),
            "kcache sim said: {line:?}"
        );
        SimProcess { child }
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
