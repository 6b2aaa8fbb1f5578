//! The admin listener's `/status` in front of the demo's simulated cluster: its JSON lists
//! every cached type of the demo configuration, synced, with the sim's object counts; the
//! page has a row per type, also in the DOM a real browser builds from it (and a screenshot
//! to look at); `kcache status`, the built binary, prints every type, and fails clearly when
//! there is no kcache to ask.

mod common;
mod tools_common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use common::{get_with, EnvBuilder, EVENTUALLY};
use kcache::config::Config;
use kcache_sim::seed;

/// What a browser sends for a page.
const BROWSER_ACCEPT: &str =
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";

/// kcache with the demo's configuration (`Config::default()`) in front of the demo's cluster,
/// synced.
async fn demo() -> common::Env {
    EnvBuilder {
        sim: kcache_sim::SimConfig::demo(),
        seed: seed::demo_cluster(&seed::DemoSpec::default()),
        ..EnvBuilder::default()
    }
    .start()
    .await
}

/// `group/version/resource` of every type the demo caches, as `/status` names them.
fn demo_types() -> BTreeSet<String> {
    Config::default()
        .resources
        .iter()
        .map(|r| {
            if r.group.is_empty() {
                format!("{}/{}", r.version, r.resource)
            } else {
                format!("{}/{}/{}", r.group, r.version, r.resource)
            }
        })
        .collect()
}

/// `/status` as JSON, once every type is synced with as many objects as the sim has.
async fn settled_report(env: &common::Env) -> serde_json::Value {
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let r = get_with(&env.admin_url(), "/status?format=json", &[]).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        let report = r.json();
        let caches = report["caches"].as_array().expect("caches").clone();
        let settled = caches.iter().all(|c| {
            let group = c["group"].as_str().unwrap();
            let resource = c["resource"].as_str().unwrap();
            c["synced"] == true
                && c["objects"].as_u64() == Some(env.sim.list(group, resource).len() as u64)
        });
        if settled {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "caches did not reach the sim's counts: {report:#}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Run the built `kcache` with `args`, off the runtime's thread (the kcache it asks is served
/// there).
async fn kcache_cli(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_kcache"))
            .args(&args)
            .env_remove("KCACHE_ADMIN_URL")
            .output()
            .expect("run kcache")
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn status_lists_every_cached_type_as_json_page_and_table() {
    let env = demo().await;
    let want = demo_types();
    let report = settled_report(&env).await;
    let caches = report["caches"].as_array().unwrap();
    let names: BTreeSet<String> = caches
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, want, "every type of the demo configuration, once");
    for c in caches {
        assert!(
            c["objects"].as_u64().unwrap() > 0,
            "the demo seeds every type: {c}"
        );
        assert_eq!(c["condition"], "synced", "{c}");
        assert_eq!(c["reachable"], true, "{c}");
        assert_eq!(c["lastList"]["reason"], "startup", "{c}");
        assert!(
            c["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
                > 0
        );
        assert!(c["bytes"].as_u64().unwrap() > 0, "{c}");
    }
    assert_eq!(report["upstream"]["reachable"], true);
    let version = report["upstream"]["version"].as_str().expect("learnt");
    assert!(version.starts_with("v1."), "{version}");
    assert!(report["upstream"]["requests"]["setup"].as_u64().unwrap() > 0);

    // A tool asking for JSON gets it without the query parameter.
    let r = get_with(
        &env.admin_url(),
        "/status",
        &[("Accept", "application/json")],
    )
    .await;
    assert_eq!(r.json()["caches"].as_array().unwrap().len(), want.len());

    // A browser gets the page: a row per type.
    let r = get_with(&env.admin_url(), "/status", &[("Accept", BROWSER_ACCEPT)]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let page = r.text();
    for name in &want {
        assert!(
            page.contains(&format!("<tr class=\"synced\" data-type=\"{name}\">")),
            "no row for {name}: {page}"
        );
    }
    assert_eq!(page.matches(" data-type=\"").count(), want.len(), "{page}");

    // curl gets the table.
    let r = get_with(&env.admin_url(), "/status", &[("Accept", "*/*")]).await;
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    let table = r.text();
    for name in &want {
        assert!(table.contains(&format!("\n{name} ")), "{table}");
    }
    let r = get_with(&env.admin_url(), "/status?format=yaml", &[]).await;
    assert_eq!(r.status, 400);

    // `kcache status`: every type, on a row of its own, synced.
    let out = kcache_cli(&["status", "--admin", &env.admin_url()]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("reachable"), "{stdout}");
    for name in &want {
        let row = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("no row for {name}:\n{stdout}"));
        assert_eq!(row.split_whitespace().nth(1), Some("synced"), "{row}");
    }
    println!("{stdout}");
}

#[tokio::test]
async fn kcache_status_says_when_there_is_no_kcache_to_ask() {
    // A port nothing listens on any more.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let out = kcache_cli(&["status", "--admin", &url]).await;
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot reach kcache's admin endpoint at {url}")),
        "{stderr}"
    );
    let out = kcache_cli(&["status", "--admin", "https://127.0.0.1:1"]).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("http://HOST:PORT URL is expected"),
        "{out:?}"
    );
    // The default is where kcache's admin listener is by default.
    let out = kcache_cli(&["status", "--help"]).await;
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains(&format!(
            "[default: http://{}]",
            Config::default().admin_listen
        )),
        "{help}"
    );
}

/// A browser process, killed (and its profile removed) when dropped, whatever happened.
struct Browser {
    child: Child,
    profile: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// How long one browser run may take on a loaded 2-core machine.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(60);

/// Run headless Chromium on `url` with `args` (a fresh profile of its own), its stdout into
/// `stdout`, until it exits or [`BROWSER_TIMEOUT`] passes.
fn chromium(exe: &Path, args: &[String], url: &str, stdout: &Path) -> ExitStatus {
    let profile = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("status-browser-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&profile).unwrap();
    let log = profile.with_extension("log");
    let child = Command::new(exe)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(stdout).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start chromium");
    let mut browser = Browser { child, profile };
    let deadline = Instant::now() + BROWSER_TIMEOUT;
    let status = loop {
        if let Some(status) = browser.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "chromium did not finish within {BROWSER_TIMEOUT:?}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    if !status.success() {
        eprintln!("{}", std::fs::read_to_string(&log).unwrap_or_default());
    }
    let _ = std::fs::remove_file(&log);
    status
}

#[tokio::test]
async fn a_browser_renders_a_row_per_type() {
    // Skipped without Chromium, unless KCACHE_TEST_TOOLS=required (see tests/tools_common).
    let Some(exe) = tools_common::tool("chromium") else {
        return;
    };
    let env = demo().await;
    let want = demo_types();
    settled_report(&env).await;
    let url = format!("{}/status", env.admin_url());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dom_file = dir.join(format!("status-dom-{}.html", uuid::Uuid::new_v4()));
    let screenshot = dir.join("status-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let (dom, shot) = {
        let (exe, url, dom_file, screenshot) = (
            exe.clone(),
            url.clone(),
            dom_file.clone(),
            screenshot.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let dom = chromium(&exe, &["--dump-dom".into()], &url, &dom_file);
            let shot = chromium(
                &exe,
                &[
                    format!("--screenshot={}", screenshot.display()),
                    "--window-size=1280,900".into(),
                ],
                &url,
                &dom_file.with_extension("out"),
            );
            (dom, shot)
        })
        .await
        .unwrap()
    };
    let _ = std::fs::remove_file(dom_file.with_extension("out"));
    assert!(dom.success(), "chromium --dump-dom: {dom}");
    let html = std::fs::read_to_string(&dom_file).unwrap();
    let _ = std::fs::remove_file(&dom_file);
    assert!(html.contains("<table id=\"caches\">"), "{html}");
    for name in &want {
        assert!(
            html.contains(&format!("data-type=\"{name}\"")),
            "no row for {name} in the browser's DOM: {html}"
        );
    }
    assert_eq!(html.matches(" data-type=\"").count(), want.len(), "{html}");

    assert!(shot.success(), "chromium --screenshot: {shot}");
    let png = std::fs::read(&screenshot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // A blank 1280x900 page compresses to a few KB; the table makes it much more.
    assert!(png.len() > 20_000, "{} bytes only", png.len());
    println!("screenshot of /status: {}", screenshot.display());

    // The upstream gone: every row is marked, in the DOM the browser builds too.
    env.sim.faults().set_unreachable(true);
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let report = get_with(&env.admin_url(), "/status?format=json", &[])
            .await
            .json();
        let caches = report["caches"].as_array().unwrap();
        if caches.iter().all(|c| c["condition"] == "stale") {
            break;
        }
        assert!(Instant::now() < deadline, "not stale: {report:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stale_shot = dir.join("status-page-stale.png");
    let (dom, shot) = tokio::task::spawn_blocking({
        let stale_shot = stale_shot.clone();
        let dom_file = dom_file.clone();
        move || {
            let dom = chromium(&exe, &["--dump-dom".into()], &url, &dom_file);
            let shot = chromium(
                &exe,
                &[
                    format!("--screenshot={}", stale_shot.display()),
                    "--window-size=1280,900".into(),
                ],
                &url,
                &dom_file.with_extension("out"),
            );
            (dom, shot)
        }
    })
    .await
    .unwrap();
    let _ = std::fs::remove_file(dom_file.with_extension("out"));
    assert!(dom.success() && shot.success(), "{dom} {shot}");
    let html = std::fs::read_to_string(&dom_file).unwrap();
    let _ = std::fs::remove_file(&dom_file);
    for name in &want {
        assert!(
            html.contains(&format!("<tr class=\"attention\" data-type=\"{name}\">")),
            "{name} not marked in the browser's DOM: {html}"
        );
    }
    assert!(html.contains("NOT reachable"), "{html}");
    assert!(std::fs::metadata(&stale_shot).unwrap().len() > 20_000);
    println!(
        "screenshot of /status, upstream down: {}",
        stale_shot.display()
    );
}
