//! WATCH fan-out: many watchers (HTTP/1.1, one connection each, or HTTP/2 streams multiplexed
//! over a few h2c connections), a writer that changes objects at a fixed rate and records when
//! each resourceVersion was written, and the delivery delays computed from both.
//!
//! A watcher does not parse JSON: it splits the stream into lines and finds the
//! `"resourceVersion":"` of each line with a substring search, noting when the line arrived.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::load::Target;

const RV_FIELD: &[u8] = b"\"resourceVersion\":\"";

static RV_FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(RV_FIELD));

/// The first `"resourceVersion":"N"` of a watch event line (the object's own: it comes in
/// `metadata` before anything that could repeat it); None for a BOOKMARK, whose
/// resourceVersion is the stream's progress, not a change (it may equal a change's).
pub fn rv_in_line(line: &[u8]) -> Option<u64> {
    if line.starts_with(br#"{"type":"BOOKMARK""#) {
        return None;
    }
    let at = RV_FINDER.find(line)? + RV_FIELD.len();
    let digits = &line[at..];
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// What one watcher received.
#[derive(Debug, Default)]
pub struct Received {
    /// The writes it should see: `None` all of them, `Some(k)` those written with key `k`.
    pub key: Option<usize>,
    /// (resourceVersion, arrival) of every event line.
    pub events: Vec<(u64, Instant)>,
    /// The server ended the stream before the watcher's time was up.
    pub ended_early: bool,
    pub error: Option<String>,
}

/// Splits a watch stream into events and notes each event's RV: JSON lines, or protobuf's
/// length-prefixed frames.
enum Splitter {
    Lines(Lines),
    Frames(Frames),
}

impl Splitter {
    /// By the answer's Content-Type, as client-go decodes: a server may answer a client that
    /// accepts protobuf and JSON in either.
    fn for_response<B>(resp: &http::Response<B>) -> Splitter {
        let protobuf = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/vnd.kubernetes.protobuf"));
        if protobuf {
            Splitter::Frames(Frames::default())
        } else {
            Splitter::Lines(Lines::default())
        }
    }

    fn feed(&mut self, chunk: &[u8], at: Instant, out: &mut Vec<(u64, Instant)>) {
        match self {
            Splitter::Lines(l) => l.feed(chunk, at, out),
            Splitter::Frames(f) => f.feed(chunk, at, out),
        }
    }
}

/// Splits a byte stream into lines and notes each line's RV.
#[derive(Default)]
struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    fn feed(&mut self, chunk: &[u8], at: Instant, out: &mut Vec<(u64, Instant)>) {
        let mut rest = chunk;
        while let Some(nl) = memchr::memchr(b'\n', rest) {
            let line = &rest[..nl];
            let rv = if self.partial.is_empty() {
                rv_in_line(line)
            } else {
                self.partial.extend_from_slice(line);
                let rv = rv_in_line(&self.partial);
                self.partial.clear();
                rv
            };
            if let Some(rv) = rv {
                out.push((rv, at));
            }
            rest = &rest[nl + 1..];
        }
        self.partial.extend_from_slice(rest);
    }
}

/// Splits a protobuf watch stream into its frames (a 4-byte big-endian length, then a
/// `WatchEvent` message) and notes each frame's RV.
#[derive(Default)]
struct Frames {
    buf: Vec<u8>,
}

impl Frames {
    fn feed(&mut self, chunk: &[u8], at: Instant, out: &mut Vec<(u64, Instant)>) {
        self.buf.extend_from_slice(chunk);
        let mut used = 0;
        while let Some(len) = self.buf.get(used..used + 4) {
            let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
            let Some(frame) = self.buf.get(used + 4..used + 4 + len) else {
                break;
            };
            if let Some(rv) = rv_in_frame(frame) {
                out.push((rv, at));
            }
            used += 4 + len;
        }
        self.buf.drain(..used);
    }
}

/// The object's resourceVersion in a protobuf watch frame: WatchEvent (field 2: object, a
/// RawExtension) → its raw bytes (field 1), the object's `k8s\0` envelope (runtime.Unknown,
/// whose field 2 is the raw message) → the object → ObjectMeta (field 1) → resourceVersion
/// (field 6).
pub fn rv_in_frame(frame: &[u8]) -> Option<u64> {
    // WatchEvent's field 1 is its type: a BOOKMARK is the stream's progress, not a change.
    if field(frame, 1) == Some(b"BOOKMARK") {
        return None;
    }
    let envelope = field(field(frame, 2)?, 1)?;
    let object = field(envelope.strip_prefix(b"k8s\0")?, 2)?;
    let rv = field(field(object, 1)?, 6)?;
    std::str::from_utf8(rv).ok()?.parse().ok()
}

/// The first length-delimited field `num` of a protobuf message.
pub fn field(mut msg: &[u8], num: u64) -> Option<&[u8]> {
    while !msg.is_empty() {
        let (tag, rest) = varint(msg)?;
        msg = rest;
        match tag & 7 {
            0 => msg = varint(msg)?.1,
            1 => msg = msg.get(8..)?,
            5 => msg = msg.get(4..)?,
            2 => {
                let (len, rest) = varint(msg)?;
                let len = usize::try_from(len).ok()?;
                let value = rest.get(..len)?;
                if tag >> 3 == num {
                    return Some(value);
                }
                msg = &rest[len..];
            }
            _ => return None,
        }
    }
    None
}

fn varint(b: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, &b[i + 1..]));
        }
    }
    None
}

/// Tells watchers to stop reading (send `true`).
pub type Stop = tokio::sync::watch::Receiver<bool>;

/// Read a watch body until told to stop (or `until` at the latest); record every event line.
async fn read_events(
    key: Option<usize>,
    mut body: Incoming,
    mut stop: Stop,
    until: tokio::time::Instant,
    counter: Arc<AtomicU64>,
    mut lines: Splitter,
) -> Received {
    let mut r = Received {
        key,
        ..Received::default()
    };
    loop {
        let frame = tokio::select! {
            f = tokio::time::timeout_at(until, body.frame()) => f,
            _ = stop.wait_for(|s| *s) => return r,
        };
        match frame {
            Err(_) => return r,
            Ok(None) => {
                r.ended_early = true;
                return r;
            }
            Ok(Some(Err(e))) => {
                r.ended_early = true;
                r.error = Some(e.to_string());
                return r;
            }
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let before = r.events.len();
                    lines.feed(data, Instant::now(), &mut r.events);
                    counter.fetch_add((r.events.len() - before) as u64, Ordering::Relaxed);
                }
            }
        }
    }
}

/// How watchers reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// One HTTP/1.1 connection per watcher.
    H1,
    /// HTTP/2 prior knowledge (h2c); watchers spread round-robin over this many connections.
    H2 { connections: usize },
}

/// Watchers that are open, each read by its own task until its time is up.
pub struct FanOut {
    pub tasks: Vec<JoinHandle<Received>>,
    /// The keys of the open watchers.
    pub keys: Vec<Option<usize>>,
    /// Event lines received so far by all watchers.
    pub events: Arc<AtomicU64>,
    /// Watchers that could not be opened.
    pub failed: usize,
    pub first_error: Option<String>,
    /// HTTP/2 connections, kept open until the fan-out is dropped.
    _h2: Vec<http2::SendRequest<Empty<Bytes>>>,
}

impl FanOut {
    /// Events the open watchers should receive for `log`'s writes.
    pub fn expected(&self, log: &WriteLog) -> u64 {
        let per_key = log.per_key();
        self.keys
            .iter()
            .map(|k| match k {
                None => log.writes.len() as u64,
                Some(k) => per_key.get(k).copied().unwrap_or(0),
            })
            .sum()
    }

    /// Wait until the watchers have received `n` events in all, at most `timeout`; true if
    /// they did.
    pub async fn wait_for_events(&self, n: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        // Bounded by the deadline: 10 ms steps.
        while self.events.load(Ordering::Relaxed) < n {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// Wait for every watcher's task (they end when told to stop, or at their `until`).
    pub async fn finish(self) -> Vec<Received> {
        let mut out = Vec::with_capacity(self.tasks.len());
        for t in self.tasks {
            out.push(t.await.unwrap_or_else(|e| Received {
                error: Some(e.to_string()),
                ..Received::default()
            }));
        }
        out
    }
}

async fn h1_watch(target: &Target, path: &str) -> Result<(Incoming, Splitter), String> {
    let mut sender = target.h1_connect().await?;
    let resp = sender
        .send_request(target.get(path))
        .await
        .map_err(|e| format!("watch request: {e}"))?;
    if resp.status() != 200 {
        return Err(format!("watch answered {}", resp.status()));
    }
    let split = Splitter::for_response(&resp);
    Ok((resp.into_body(), split))
}

async fn h2_watch(
    mut sender: http2::SendRequest<Empty<Bytes>>,
    target: &Target,
    path: &str,
) -> Result<(Incoming, Splitter), String> {
    sender
        .ready()
        .await
        .map_err(|e| format!("h2 connection: {e}"))?;
    let mut req = target.get(path);
    // HTTP/2 carries the authority in the URI, not a Host header.
    let scheme = if target.tls.is_some() {
        "https"
    } else {
        "http"
    };
    *req.uri_mut() = format!("{scheme}://{}{path}", target.authority)
        .parse()
        .map_err(|e| format!("{e}"))?;
    req.headers_mut().remove(http::header::HOST);
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("h2 watch request: {e}"))?;
    if resp.status() != 200 {
        return Err(format!("watch answered {}", resp.status()));
    }
    let split = Splitter::for_response(&resp);
    Ok((resp.into_body(), split))
}

/// Open an h2c (prior knowledge) connection.
pub async fn h2_connect(addr: SocketAddr) -> Result<http2::SendRequest<Empty<Bytes>>, String> {
    h2_connect_to(&Target::plain(addr)).await
}

/// Open an HTTP/2 connection to `target`: h2c, or h2 negotiated by ALPN over TLS.
pub async fn h2_connect_to(target: &Target) -> Result<http2::SendRequest<Empty<Bytes>>, String> {
    let tcp = target.tcp().await?;
    match &target.tls {
        None => h2_handshake(tcp).await,
        Some(tls) => {
            let stream = tls.connect(tcp, true).await?;
            // A server without HTTP/2 would take the preface for a broken HTTP/1.1 request.
            if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(format!(
                    "{} did not agree to HTTP/2 (ALPN)",
                    target.authority
                ));
            }
            h2_handshake(stream).await
        }
    }
}

async fn h2_handshake<S>(io: S) -> Result<http2::SendRequest<Empty<Bytes>>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(1024 * 1024)
        .initial_connection_window_size(16 * 1024 * 1024)
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("h2 handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Open one watcher per `(key, path)`, at most `parallel` openings at a time; each reads
/// until `stop` says so, or `until` at the latest. Returns once every watcher has its response
/// headers (or failed).
pub async fn open(
    addr: SocketAddr,
    proto: Proto,
    watches: Vec<(Option<usize>, String)>,
    stop: Stop,
    until: Instant,
    parallel: usize,
) -> FanOut {
    open_to(&Target::plain(addr), proto, watches, stop, until, parallel).await
}

/// [`open`] on any target (HTTPS, with credentials).
pub async fn open_to(
    target: &Target,
    proto: Proto,
    watches: Vec<(Option<usize>, String)>,
    stop: Stop,
    until: Instant,
    parallel: usize,
) -> FanOut {
    let until = tokio::time::Instant::from_std(until);
    let mut h2 = Vec::new();
    if let Proto::H2 { connections } = proto {
        for _ in 0..connections.max(1) {
            match h2_connect_to(target).await {
                Ok(s) => h2.push(s),
                Err(e) => {
                    return FanOut {
                        tasks: Vec::new(),
                        keys: Vec::new(),
                        events: Arc::new(AtomicU64::new(0)),
                        failed: watches.len(),
                        first_error: Some(e),
                        _h2: Vec::new(),
                    }
                }
            }
        }
    }
    let permits = Arc::new(Semaphore::new(parallel.max(1)));
    let counter = Arc::new(AtomicU64::new(0));
    let mut opening = Vec::with_capacity(watches.len());
    for (i, (key, path)) in watches.into_iter().enumerate() {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore open");
        let sender = (!h2.is_empty()).then(|| h2[i % h2.len()].clone());
        let stop = stop.clone();
        let counter = counter.clone();
        let target = target.for_watch(i);
        opening.push(tokio::spawn(async move {
            let body = match sender {
                Some(s) => h2_watch(s, &target, &path).await,
                None => h1_watch(&target, &path).await,
            };
            drop(permit);
            body.map(|(b, split)| {
                let reader = read_events(key, b, stop, until, counter, split);
                (key, tokio::spawn(reader))
            })
        }));
    }
    let mut fan = FanOut {
        tasks: Vec::with_capacity(opening.len()),
        keys: Vec::with_capacity(opening.len()),
        events: counter,
        failed: 0,
        first_error: None,
        _h2: h2,
    };
    for o in opening {
        match o.await {
            Ok(Ok((key, task))) => {
                fan.keys.push(key);
                fan.tasks.push(task);
            }
            Ok(Err(e)) => {
                fan.failed += 1;
                fan.first_error.get_or_insert(e);
            }
            Err(e) => {
                fan.failed += 1;
                fan.first_error.get_or_insert(e.to_string());
            }
        }
    }
    fan
}

/// Watchers that send their request and then never read: their receive buffer is made small
/// so that the server's writes back up quickly.
pub struct Stalled {
    _streams: Vec<TcpStream>,
    pub failed: usize,
}

pub async fn open_stalled(addr: SocketAddr, path: &str, n: usize) -> Stalled {
    let mut streams = Vec::with_capacity(n);
    let mut failed = 0;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\nUser-Agent: kcache-bench-stalled\r\n\r\n"
    );
    for _ in 0..n {
        let stream = async {
            let socket = TcpSocket::new_v4()?;
            socket.set_recv_buffer_size(4096)?;
            let mut s = socket.connect(addr).await?;
            s.write_all(request.as_bytes()).await?;
            Ok::<_, std::io::Error>(s)
        };
        match stream.await {
            Ok(s) => streams.push(s),
            Err(_) => failed += 1,
        }
    }
    Stalled {
        _streams: streams,
        failed,
    }
}

/// When each resourceVersion was written, and with which key.
#[derive(Debug, Default)]
pub struct WriteLog {
    pub writes: HashMap<u64, (Instant, usize)>,
    pub failed: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
}

/// `count` writes at `rate` per second; `write(i)` performs the i-th and returns
/// (resourceVersion, key). The time recorded is when the write returned (was acknowledged).
pub async fn write_at_rate<F>(rate: f64, count: u64, mut write: F) -> WriteLog
where
    F: FnMut(u64) -> Result<(u64, usize), String>,
{
    let start = tokio::time::Instant::now();
    let mut log = WriteLog::default();
    for i in 0..count {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
        match write(i) {
            Ok((rv, key)) => {
                log.writes.insert(rv, (Instant::now(), key));
            }
            Err(e) => {
                log.failed += 1;
                log.first_error.get_or_insert(e);
            }
        }
    }
    log.elapsed = start.elapsed();
    log
}

/// Delivery of the writes to the watchers.
#[derive(Debug, Default, Clone)]
pub struct Delivery {
    pub watchers: usize,
    /// Events the watchers should have received.
    pub expected: u64,
    /// Events received that match a write meant for the watcher.
    pub delivered: u64,
    /// Watch streams the server ended early.
    pub ended_early: usize,
    /// Write-to-arrival delays of the delivered events, sorted.
    pub delays: Vec<Duration>,
}

impl Delivery {
    pub fn percentile(&self, q: f64) -> Duration {
        super::load::percentile(&self.delays, q)
    }

    pub fn max(&self) -> Duration {
        self.delays.last().copied().unwrap_or_default()
    }

    pub fn missing(&self) -> u64 {
        self.expected.saturating_sub(self.delivered)
    }
}

impl WriteLog {
    /// Writes per key.
    pub fn per_key(&self) -> HashMap<usize, u64> {
        let mut per_key: HashMap<usize, u64> = HashMap::new();
        for (_, key) in self.writes.values() {
            *per_key.entry(*key).or_default() += 1;
        }
        per_key
    }
}

/// Match what the watchers received against what was written.
pub fn delivery(log: &WriteLog, received: &[Received]) -> Delivery {
    let per_key = log.per_key();
    let mut d = Delivery {
        watchers: received.len(),
        ..Delivery::default()
    };
    for r in received {
        d.expected += match r.key {
            None => log.writes.len() as u64,
            Some(k) => per_key.get(&k).copied().unwrap_or(0),
        };
        d.ended_early += usize::from(r.ended_early);
        for (rv, at) in &r.events {
            if let Some((written, key)) = log.writes.get(rv) {
                if r.key.is_none_or(|k| k == *key) {
                    d.delivered += 1;
                    d.delays.push(at.saturating_duration_since(*written));
                }
            }
        }
    }
    d.delays.sort_unstable();
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_rv_of_a_line() {
        let line = br#"{"type":"MODIFIED","object":{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"1234","uid":"x"}}}"#;
        assert_eq!(rv_in_line(line), Some(1234));
        assert_eq!(rv_in_line(b"{\"type\":\"BOOKMARK\"}"), None);
        // A bookmark's resourceVersion is progress, not a change, even where it equals one's.
        let bookmark = br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1234"}}}"#;
        assert_eq!(rv_in_line(bookmark), None);
    }

    #[test]
    fn lines_split_across_chunks() {
        let mut lines = Lines::default();
        let mut out = Vec::new();
        let now = Instant::now();
        let a = br#"{"metadata":{"resourceVersion":"7"}}"#;
        let b = br#"{"metadata":{"resourceVersion":"8"}}"#;
        let mut stream = Vec::new();
        stream.extend_from_slice(a);
        stream.push(b'\n');
        stream.extend_from_slice(b);
        stream.push(b'\n');
        let (x, y) = stream.split_at(20);
        lines.feed(x, now, &mut out);
        lines.feed(y, now, &mut out);
        assert_eq!(out.iter().map(|e| e.0).collect::<Vec<_>>(), vec![7, 8]);
    }

    /// A length-delimited protobuf field.
    fn ld(num: u8, value: &[u8]) -> Vec<u8> {
        assert!(value.len() < 128);
        let mut out = vec![num << 3 | 2, value.len() as u8];
        out.extend_from_slice(value);
        out
    }

    /// `k8s\0` + runtime.Unknown{typeMeta, raw}.
    fn envelope(raw: &[u8]) -> Vec<u8> {
        let mut out = b"k8s\0".to_vec();
        out.extend(ld(1, &[ld(1, b"v1"), ld(2, b"ConfigMap")].concat()));
        out.extend(ld(2, raw));
        out
    }

    #[test]
    fn protobuf_frames_split_across_chunks() {
        let frame = |kind: &[u8], rv: &str| {
            let meta = [ld(1, b"a"), ld(3, b"ns"), ld(6, rv.as_bytes())].concat();
            let object = envelope(&[ld(1, &meta), ld(2, b"")].concat());
            let body = [ld(1, kind), ld(2, &ld(1, &object))].concat();
            let mut out = (body.len() as u32).to_be_bytes().to_vec();
            out.extend(body);
            out
        };
        // The bookmark between the changes is not one of them.
        let stream = [
            frame(b"MODIFIED", "7"),
            frame(b"BOOKMARK", "7"),
            frame(b"MODIFIED", "1234"),
        ]
        .concat();
        let mut frames = Frames::default();
        let mut out = Vec::new();
        let now = Instant::now();
        let (x, y) = stream.split_at(30);
        frames.feed(x, now, &mut out);
        assert!(out.is_empty());
        frames.feed(y, now, &mut out);
        assert_eq!(out.iter().map(|e| e.0).collect::<Vec<_>>(), vec![7, 1234]);
        assert!(frames.buf.is_empty());
    }
}
