//! `kcache serve --exit-with-parent`, as `kcache bench` starts its targets: when the process
//! that started kcache ends, however it ends (here SIGKILL, which no handler sees), kcache
//! stops on its own instead of running on, orphaned, holding its ports and memory.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::wait_until;
use kcache_sim::Sim;

/// A directory of the test's own under the system's temporary directory.
fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kcache-parent-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `dir/kubeconfig` pointing at `sim`, and `dir/kcache.yaml` caching ConfigMaps.
fn setup(dir: &Path, sim: &Sim) {
    common::write_kubeconfig(&dir.join("kubeconfig"), sim);
    std::fs::write(
        dir.join("kcache.yaml"),
        "resources: [{version: v1, resource: configmaps}]\n",
    )
    .unwrap();
}

fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

/// Whether process `pid` still runs (a zombie has ended: it only waits to be reaped by
/// whoever adopted it).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[tokio::test]
async fn kcache_stops_when_the_process_that_started_it_is_killed() {
    common::init_logs();
    let dir = tempdir();
    let sim = Sim::start(kcache_sim::SimConfig::default()).await.unwrap();
    setup(&dir, &sim);
    let (listen, admin) = (free_addr(), free_addr());
    // The parent: a shell that starts kcache in the background, says its pid and waits.
    let mut parent = Command::new("sh")
        .arg("-c")
        .arg(
            "\"$0\" serve --exit-with-parent --config \"$1\" --kubeconfig \"$2\" \
             --listen \"$3\" --admin-listen \"$4\" >/dev/null 2>&1 & echo $!; wait",
        )
        .arg(env!("CARGO_BIN_EXE_kcache"))
        .arg(dir.join("kcache.yaml"))
        .arg(dir.join("kubeconfig"))
        .arg(&listen)
        .arg(&admin)
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh starts");
    let mut line = String::new();
    BufReader::new(parent.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let kcache: u32 = line.trim().parse().expect("the shell says kcache's pid");
    // kcache serves: it got past its start before its parent goes.
    wait_until("kcache listens", || {
        let listen = listen.clone();
        async move { tokio::net::TcpStream::connect(&listen).await.is_ok() }
    })
    .await;
    assert!(running(kcache));

    parent.kill().unwrap(); // SIGKILL
    parent.wait().unwrap();
    wait_until("kcache stops after its parent was killed", || async {
        !running(kcache)
    })
    .await;
    // It stopped as on SIGTERM, not by a crash: its ports are free again.
    assert!(std::net::TcpListener::bind(&listen).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}
