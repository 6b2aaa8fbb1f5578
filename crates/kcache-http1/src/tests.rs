//! The client against a scripted HTTP/1.1 server on a real socket: each test's server
//! answers with the bytes a test names, split as it names them, and counts connections.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::*;

/// What the server writes for one request: pieces written one by one, then whether it
/// closes the connection.
struct Reply {
    pieces: Vec<Vec<u8>>,
    close: bool,
    /// Before writing the piece at this index, wait for the test's go.
    gate: Option<(usize, Arc<tokio::sync::Notify>)>,
    /// Told once every piece is written (and the connection closed, if it is).
    done: Option<Arc<tokio::sync::Notify>>,
}

fn reply(pieces: &[&str]) -> Reply {
    Reply {
        pieces: pieces.iter().map(|p| p.as_bytes().to_vec()).collect(),
        close: false,
        gate: None,
        done: None,
    }
}

fn closing(pieces: &[&str]) -> Reply {
    Reply {
        close: true,
        ..reply(pieces)
    }
}

type Script = Arc<dyn Fn(usize, &str) -> Reply + Send + Sync>;

/// A server answering every request by `script(connection number, request head)`.
struct Server {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(script: impl Fn(usize, &str) -> Reply + Send + Sync + 'static) -> Server {
        let script: Script = Arc::new(script);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (connections.clone(), heads.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                socket.set_nodelay(true).unwrap();
                let n = count.fetch_add(1, Ordering::SeqCst);
                let (script, seen) = (script.clone(), seen.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let end = loop {
                            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                break end + 4;
                            }
                            let mut more = [0u8; 1024];
                            match socket.read(&mut more).await {
                                Ok(0) | Err(_) => return,
                                Ok(k) => buf.extend_from_slice(&more[..k]),
                            }
                        };
                        let head = String::from_utf8(buf.drain(..end).collect()).unwrap();
                        seen.lock().unwrap().push(head.clone());
                        let answer = script(n, &head);
                        for (i, piece) in answer.pieces.into_iter().enumerate() {
                            if let Some((_, go)) = answer.gate.as_ref().filter(|(at, _)| *at == i) {
                                go.notified().await;
                            }
                            if socket.write_all(&piece).await.is_err() {
                                return;
                            }
                            socket.flush().await.unwrap();
                            tokio::task::yield_now().await;
                        }
                        if answer.close {
                            drop(socket);
                            if let Some(done) = answer.done {
                                done.notify_one();
                            }
                            return;
                        }
                        if let Some(done) = answer.done {
                            done.notify_one();
                        }
                    }
                });
            }
        });
        Server {
            addr,
            connections,
            heads,
        }
    }

    fn client(&self) -> Client {
        Client::builder()
            .build(&format!("http://{}", self.addr).parse().unwrap())
            .unwrap()
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn get(path: &str) -> http::request::Parts {
    Request::get(path)
        .header("authorization", "Bearer t")
        .body(())
        .unwrap()
        .into_parts()
        .0
}

/// GET `path` `times` over, each answer's body `want`.
async fn read_each(client: &Client, path: &str, times: usize, want: &str) {
    for _ in 0..times {
        let resp = client.send(get(path)).await.unwrap();
        assert_eq!(text(resp).await.unwrap(), want);
    }
}

async fn text(resp: Response<Body>) -> Result<String, Error> {
    let bytes = resp.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn a_sized_answer_is_read_and_its_connection_kept() {
    let server = Server::start(|_, _| {
        reply(&["HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nAudit-Id: a\r\nX-Empty:\r\nWarning: 299 - \"one\"\r\nWarning: 299 - \"two\"\r\nContent-Length: 11\r\n\r\n{\"kind\":1}\n"])
    })
    .await;
    let client = server.client();
    for _ in 0..3 {
        let resp = client
            .send(get("/api/v1/namespaces?limit=1"))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["audit-id"], "a");
        assert_eq!(resp.headers()["content-type"], "application/json");
        assert_eq!(resp.headers()["x-empty"], "");
        let warnings: Vec<_> = resp.headers().get_all("warning").iter().collect();
        assert_eq!(warnings, ["299 - \"one\"", "299 - \"two\""]);
        assert_eq!(text(resp).await.unwrap(), "{\"kind\":1}\n");
    }
    assert_eq!(server.connections(), 1, "one kept-alive connection");
    let head = server.heads.lock().unwrap()[0].clone();
    assert_eq!(
        head,
        format!(
            "GET /api/v1/namespaces?limit=1 HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer t\r\n\r\n",
            server.addr
        )
    );
}

#[tokio::test]
async fn a_path_in_the_origin_comes_before_each_requests_path() {
    let server = Server::start(|_, _| reply(&["HTTP/1.1 204 No Content\r\n\r\n"])).await;
    let client = Client::builder()
        .build(
            &format!("http://{}/k8s/clusters/c-1/", server.addr)
                .parse()
                .unwrap(),
        )
        .unwrap();
    client.send(get("/api/v1/pods?limit=1")).await.unwrap();
    let head = server.heads.lock().unwrap()[0].clone();
    assert!(
        head.starts_with("GET /k8s/clusters/c-1/api/v1/pods?limit=1 HTTP/1.1\r\n"),
        "{head}"
    );
}

#[tokio::test]
async fn a_chunked_answer_split_anywhere_is_decoded() {
    let server = Server::start(|_, _| {
        reply(&[
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "5\r\nhel",
            "lo\r\n6;ext=1\r",
            "\n world\r\n",
            "0\r\n",
            "X-Trailer: 1\r\n\r\n",
        ])
    })
    .await;
    let client = server.client();
    read_each(&client, "/w", 2, "hello world").await;
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn a_watch_streams_each_chunk_as_it_arrives() {
    let go = Arc::new(tokio::sync::Notify::new());
    let gate = go.clone();
    let server = Server::start(move |_, _| Reply {
        gate: Some((2, gate.clone())),
        ..reply(&[
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "4\r\nev1\n\r\n",
            "4\r\nev2\n\r\n0\r\n\r\n",
        ])
    })
    .await;
    let client = server.client();
    let mut body = client.send(get("/watch")).await.unwrap().into_body();
    // The second event is written only after the first has been read.
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "ev1\n");
    assert_eq!(
        client.shared.pool.idle(),
        0,
        "the watch holds its connection"
    );
    go.notify_one();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, "ev2\n");
    assert_eq!(client.shared.pool.idle(), 1, "kept after the last chunk");
}

#[tokio::test]
async fn an_answer_to_the_connections_end_is_read_and_the_connection_not_kept() {
    let server =
        Server::start(|_, _| closing(&["HTTP/1.1 200 OK\r\n\r\n", "part one, ", "part two"])).await;
    let client = server.client();
    read_each(&client, "/", 2, "part one, part two").await;
    assert_eq!(server.connections(), 2);
}

#[tokio::test]
async fn connection_close_and_http_1_0_answers_are_not_kept() {
    let server = Server::start(|n, _| match n {
        0 => reply(&["HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"]),
        _ => reply(&["HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"]),
    })
    .await;
    let client = server.client();
    read_each(&client, "/", 3, "ok").await;
    assert_eq!(server.connections(), 3);
}

#[tokio::test]
async fn answers_without_a_body_free_their_connection_at_once() {
    let server = Server::start(|_, head| {
        if head.starts_with("HEAD") {
            reply(&["HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"])
        } else if head.contains("/interim") {
            reply(&[
                "HTTP/1.1 100 Continue\r\n\r\n",
                "HTTP/1.1 204 No Content\r\n\r\n",
            ])
        } else {
            reply(&["HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n"])
        }
    })
    .await;
    let client = server.client();
    let mut head = get("/");
    head.method = http::Method::HEAD;
    let resp = client.send(head).await.unwrap();
    assert_eq!(resp.headers()["content-length"], "1234");
    assert!(http_body::Body::is_end_stream(resp.body()));
    assert_eq!(
        client.shared.pool.idle(),
        1,
        "kept before the body is polled"
    );
    drop(resp);
    let resp = client.send(get("/interim")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert_eq!(text(resp).await.unwrap(), "");
    let resp = client.send(get("/")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(text(resp).await.unwrap(), "");
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn a_request_on_a_connection_the_server_closed_is_sent_again_on_a_new_one() {
    // The server answers one request per connection and closes it without saying so.
    let server =
        Server::start(|_, _| closing(&["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])).await;
    let client = server.client();
    read_each(&client, "/", 3, "ok").await;
    assert_eq!(server.connections(), 3);
}

#[tokio::test]
async fn a_new_connection_closed_before_an_answer_is_an_error_not_a_retry() {
    let server = Server::start(|_, _| closing(&[])).await;
    let err = server.client().send(get("/")).await.unwrap_err();
    assert!(matches!(err, Error::Closed), "{err}");
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn a_body_cut_short_is_an_error_and_its_connection_dropped() {
    let server =
        Server::start(|_, _| closing(&["HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcde"]))
            .await;
    let resp = server.client().send(get("/")).await.unwrap();
    let err = text(resp).await.unwrap_err();
    assert!(matches!(err, Error::Truncated), "{err}");
    let server = Server::start(|_, _| {
        closing(&["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc"])
    })
    .await;
    let resp = server.client().send(get("/")).await.unwrap();
    assert!(matches!(text(resp).await.unwrap_err(), Error::Truncated));
}

#[tokio::test]
async fn a_body_dropped_before_its_end_closes_its_connection() {
    let server =
        Server::start(|_, _| reply(&["HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab", "cd"]))
            .await;
    let client = server.client();
    let resp = client.send(get("/")).await.unwrap();
    drop(resp);
    let resp = client.send(get("/")).await.unwrap();
    assert_eq!(text(resp).await.unwrap(), "abcd");
    assert_eq!(server.connections(), 2);
    assert_eq!(client.shared.pool.idle(), 1);
}

#[tokio::test]
async fn malformed_answers_are_errors() {
    for answer in [
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 101 Switching Protocols\r\n\r\n",
        "HTTX/1.1 200 OK\r\n\r\n",
    ] {
        let server = Server::start(move |_, _| closing(&[answer])).await;
        let err = server.client().send(get("/")).await.unwrap_err();
        assert!(matches!(err, Error::Malformed(_)), "{answer:?}: {err}");
    }
    let server = Server::start(|_, _| {
        reply(&["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"])
    })
    .await;
    let resp = server.client().send(get("/")).await.unwrap();
    assert!(matches!(text(resp).await.unwrap_err(), Error::Malformed(_)));
}

#[tokio::test]
async fn requests_it_does_not_take_are_refused_and_named() {
    let ok = Request::get("/")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    assert!(Client::can_send(&ok));
    let post = Request::post("/")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    assert!(!Client::can_send(&post));
    let with_body = Request::get("/")
        .body(http_body_util::Full::new(bytes::Bytes::from("x")))
        .unwrap();
    assert!(!Client::can_send(&with_body));
    let upgrade = Request::get("/")
        .header("upgrade", "websocket")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    assert!(!Client::can_send(&upgrade));
    let server = Server::start(|_, _| reply(&[])).await;
    let err = server.client().send(post.into_parts().0).await.unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)));
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn an_unreachable_origin_is_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = Client::builder()
        .connect_timeout(Some(std::time::Duration::from_secs(5)))
        .build(&format!("http://{addr}").parse().unwrap())
        .unwrap();
    let err = client.send(get("/")).await.unwrap_err();
    assert!(matches!(err, Error::Connect(..)), "{err}");
}

#[test]
fn origins_are_http_or_https_with_tls_settings() {
    let build = |uri: &str| Client::builder().build(&uri.parse().unwrap());
    assert!(build("http://[::1]:8080").is_ok());
    assert!(matches!(
        build("https://example.com"),
        Err(Error::Origin(_))
    ));
    assert!(matches!(build("ftp://example.com"), Err(Error::Origin(_))));
    assert!(matches!(build("/no/origin"), Err(Error::Origin(_))));
}

/// A TLS server for `name` on 127.0.0.1 answering one sized answer per request, with the
/// ALPN protocol each handshake chose; and the client settings trusting it.
async fn tls_server(
    name: &str,
) -> (
    SocketAddr,
    rustls::ClientConfig,
    Arc<Mutex<Vec<Option<Vec<u8>>>>>,
) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key_der = rustls_pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key_der)
        .unwrap();
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let alpn = Arc::new(Mutex::new(Vec::new()));
    let seen = alpn.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let Ok(mut tls) = acceptor.accept(socket).await else {
                continue;
            };
            seen.lock()
                .unwrap()
                .push(tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec));
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut more = [0u8; 1024];
                while let Ok(k) = tls.read(&mut more).await {
                    if k == 0 {
                        return;
                    }
                    buf.extend_from_slice(&more[..k]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecure";
                        if tls.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (addr, client, alpn)
}

#[tokio::test]
async fn https_origins_speak_http_1_1_over_tls_checked_against_the_server_name() {
    let (addr, tls, alpn) = tls_server("apiserver.test").await;
    // The address is an IP; the certificate names the server, as a kubeconfig's
    // `tls-server-name` says.
    let client = Client::builder()
        .tls(tls.clone())
        .server_name(Some("apiserver.test".into()))
        .build(&format!("https://{addr}").parse().unwrap())
        .unwrap();
    for _ in 0..2 {
        let resp = client.send(get("/version")).await.unwrap();
        assert_eq!(text(resp).await.unwrap(), "secure");
    }
    assert_eq!(
        *alpn.lock().unwrap(),
        vec![Some(b"http/1.1".to_vec())],
        "one connection, HTTP/1.1"
    );
    // Without the server name the certificate does not match the address.
    let unnamed = Client::builder()
        .tls(tls)
        .build(&format!("https://{addr}").parse().unwrap())
        .unwrap();
    let err = unnamed.send(get("/version")).await.unwrap_err();
    assert!(matches!(err, Error::Connect(..)), "{err}");
}

/// An answer that came on an idle connection answers no request of ours: a server that
/// times out an idle connection may send a 408 before closing it (RFC 9110 §15.5.9), and it
/// must not be taken as the answer to the next request sent on that connection.
#[tokio::test]
async fn a_408_sent_on_an_idle_connection_is_not_taken_as_the_next_answer() {
    let go = Arc::new(tokio::sync::Notify::new());
    let done = Arc::new(tokio::sync::Notify::new());
    let (gate, sent) = (go.clone(), done.clone());
    let server = Server::start(move |n, _| match n {
        0 => Reply {
            gate: Some((1, gate.clone())),
            done: Some(sent.clone()),
            ..closing(&[
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            ])
        },
        _ => reply(&["HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnew"]),
    })
    .await;
    let client = server.client();
    read_each(&client, "/", 1, "ok").await;
    assert_eq!(client.shared.pool.idle(), 1);
    // The connection is idle in the pool when the 408 and the close come.
    go.notify_one();
    done.notified().await;
    let resp = client.send(get("/")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await.unwrap(), "new");
    assert_eq!(server.connections(), 2);
}

/// A 408 that crossed the request on its way (the server closed the connection as idle
/// just as the request came) is no answer to it: the request is sent again on a new
/// connection (RFC 9110 §15.5.9). On a new connection a 408 is the answer.
#[tokio::test]
async fn a_408_to_a_request_on_a_reused_connection_is_sent_again_on_a_new_one() {
    let server = Server::start(|n, head| match n {
        0 if head.contains("/second") => closing(&[
            "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        ]),
        0 => reply(&["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]),
        1 => reply(&["HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnew"]),
        _ => closing(&["HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n"]),
    })
    .await;
    let client = server.client();
    read_each(&client, "/first", 1, "ok").await;
    read_each(&client, "/second", 1, "new").await;
    assert_eq!(server.connections(), 2);
    // A new connection's 408 is handed on.
    let fresh = server.client();
    let resp = fresh.send(get("/third")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::REQUEST_TIMEOUT);
    assert_eq!(server.connections(), 3);
}

/// As above, when the 408 came while tokio's reactor was not polled, so that it has not been
/// told of it (a busy runtime): whether anything came is asked of the socket itself. The
/// server is a thread of its own with blocking sockets, and the test blocks its runtime's only
/// thread until the 408 is on the client's socket, then sends at once.
#[tokio::test]
async fn a_408_the_runtime_has_not_seen_yet_is_not_taken_as_the_next_answer() {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (go, went) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let answer = |socket: &mut std::net::TcpStream, bytes: &[u8]| {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && socket.read(&mut byte).unwrap() == 1 {
                head.push(byte[0]);
            }
            socket.write_all(bytes).unwrap();
        };
        let (mut first, _) = listener.accept().unwrap();
        answer(
            &mut first,
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        );
        went.recv().unwrap();
        first
            .write_all(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n")
            .unwrap();
        drop(first);
        let (mut second, _) = listener.accept().unwrap();
        answer(
            &mut second,
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnew",
        );
    });
    let client = Client::builder()
        .build(&format!("http://{addr}").parse().unwrap())
        .unwrap();
    read_each(&client, "/", 1, "ok").await;
    assert_eq!(client.shared.pool.idle(), 1);
    go.send(()).unwrap();
    client.shared.pool.block_until_readable();
    let resp = client.send(get("/")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await.unwrap(), "new");
    server.join().unwrap();
}

/// Bytes that arrive on an idle connection, here the body a server wrongly sent after its
/// answer to a HEAD, late, make the connection unfit for another request: they would be
/// read as the start of the next answer.
#[tokio::test]
async fn bytes_arriving_on_an_idle_connection_make_it_discarded() {
    let go = Arc::new(tokio::sync::Notify::new());
    let done = Arc::new(tokio::sync::Notify::new());
    let (gate, sent) = (go.clone(), done.clone());
    let server = Server::start(move |n, head| match n {
        0 if head.starts_with("HEAD") => Reply {
            gate: Some((1, gate.clone())),
            done: Some(sent.clone()),
            ..reply(&["HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "hello"])
        },
        0 => reply(&["HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nold"]),
        _ => reply(&["HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnew"]),
    })
    .await;
    let client = server.client();
    let mut head = get("/");
    head.method = http::Method::HEAD;
    let resp = client.send(head).await.unwrap();
    assert_eq!(text(resp).await.unwrap(), "");
    assert_eq!(client.shared.pool.idle(), 1);
    go.notify_one();
    done.notified().await;
    read_each(&client, "/", 1, "new").await;
    assert_eq!(server.connections(), 2);
    assert_eq!(client.shared.pool.idle(), 1, "the new connection is kept");
}

/// Only a connection whose answer was read to its end goes back to the pool: not one whose
/// body broke off in an error, nor one with bytes past its answer's end.
#[tokio::test]
async fn a_connection_whose_answer_was_not_read_to_its_end_is_not_reused() {
    let server = Server::start(|n, head| match n {
        0 => reply(&["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\nzz\r\n"]),
        1 if head.contains("/extra") => {
            reply(&["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"])
        }
        _ => reply(&["HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnew"]),
    })
    .await;
    let client = server.client();
    let resp = client.send(get("/broken")).await.unwrap();
    assert!(matches!(text(resp).await.unwrap_err(), Error::Malformed(_)));
    assert_eq!(client.shared.pool.idle(), 0);
    // A new connection; its answer has bytes past its end.
    read_each(&client, "/extra", 1, "ok").await;
    read_each(&client, "/", 2, "new").await;
    assert_eq!(server.connections(), 3);
}

/// The answer's head must come within the head timeout; then the request fails, is not sent
/// again, and its connection is closed. A request's own bound overrides the client's.
#[tokio::test]
async fn an_answer_head_not_in_within_the_head_timeout_is_an_error() {
    // Never told: the answer to /slow never comes.
    let never = Arc::new(tokio::sync::Notify::new());
    let server = Server::start(move |_, head| {
        let ok = reply(&["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]);
        if head.contains("/slow") {
            Reply {
                gate: Some((0, never.clone())),
                ..ok
            }
        } else {
            ok
        }
    })
    .await;
    let limit = Duration::from_millis(100);
    let client = Client::builder()
        .head_timeout(Some(limit))
        .build(&format!("http://{}", server.addr).parse().unwrap())
        .unwrap();
    read_each(&client, "/", 1, "ok").await;
    assert_eq!(client.shared.pool.idle(), 1);
    let err = client.send(get("/slow")).await.unwrap_err();
    assert!(matches!(err, Error::HeadTimeout(d) if d == limit), "{err}");
    assert_eq!(client.shared.pool.idle(), 0, "the connection is dropped");
    let slow = |server: &Server| {
        let heads = server.heads.lock().unwrap();
        heads.iter().filter(|h| h.contains("/slow")).count()
    };
    assert_eq!(slow(&server), 1, "not sent again");
    read_each(&client, "/", 1, "ok").await;
    assert_eq!(server.connections(), 2);

    let unbounded = Client::builder()
        .head_timeout(None)
        .build(&format!("http://{}", server.addr).parse().unwrap())
        .unwrap();
    let mut req = get("/slow");
    let own = Duration::from_millis(50);
    req.extensions.insert(HeadTimeoutOverride(Some(own)));
    let err = unbounded.send(req).await.unwrap_err();
    assert!(matches!(err, Error::HeadTimeout(d) if d == own), "{err}");
}

/// Interim (1xx) answers before the final one are skipped, up to a bound: a server sending
/// them without end is an error, not a loop.
#[tokio::test]
async fn interim_answers_past_the_cap_are_an_error_not_a_loop() {
    const INTERIM: &str = "HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n";
    const OK: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let server = Server::start(|_, head| {
        let n = if head.contains("/many") { 17 } else { 16 };
        let mut pieces = vec![INTERIM; n];
        pieces.push(OK);
        reply(&pieces)
    })
    .await;
    let client = server.client();
    read_each(&client, "/", 1, "ok").await;
    let err = client.send(get("/many")).await.unwrap_err();
    assert!(matches!(err, Error::Malformed(_)), "{err}");
    assert_eq!(client.shared.pool.idle(), 0);
}

/// RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 answer means faulty framing, whatever a
/// Content-Length says: the body is what comes until the server closes, handed on as it
/// came, with no Content-Length, and the connection is not reused.
#[tokio::test]
async fn transfer_encoding_in_an_http_1_0_answer_is_read_to_the_close() {
    let server = Server::start(|_, _| {
        closing(&[
            "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            "5\r\nhello\r\n",
            "0\r\n\r\n",
        ])
    })
    .await;
    let client = server.client();
    let resp = client.send(get("/")).await.unwrap();
    assert!(!resp.headers().contains_key(header::CONTENT_LENGTH));
    assert_eq!(text(resp).await.unwrap(), "5\r\nhello\r\n0\r\n\r\n");
    assert_eq!(client.shared.pool.idle(), 0);
}

/// RFC 9112 §6.3, item 3: with both Transfer-Encoding and Content-Length, Transfer-Encoding
/// frames the body, the Content-Length is not handed on, and the connection is closed after.
#[tokio::test]
async fn transfer_encoding_with_content_length_wins_and_the_connection_is_closed() {
    let server = Server::start(|_, _| {
        reply(&["HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"])
    })
    .await;
    let client = server.client();
    for _ in 0..2 {
        let resp = client.send(get("/")).await.unwrap();
        assert!(!resp.headers().contains_key(header::CONTENT_LENGTH));
        assert_eq!(text(resp).await.unwrap(), "hello");
        assert_eq!(client.shared.pool.idle(), 0);
    }
    assert_eq!(server.connections(), 2);
}

/// A request's fields about its own connection (RFC 9110 §7.6.1), those its `Connection`
/// names, `Proxy-Authorization` and a `Content-Length` for a body never sent, are not sent.
#[tokio::test]
async fn hop_by_hop_request_fields_are_not_sent() {
    let server =
        Server::start(|_, _| reply(&["HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"])).await;
    let client = server.client();
    let mut req = get("/");
    for (name, value) in [
        ("connection", "X-Hop, keep-alive"),
        ("x-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("te", "trailers"),
        ("trailer", "x-t"),
        ("transfer-encoding", "chunked"),
        ("content-length", "5"),
        ("proxy-authorization", "Basic eA=="),
        ("accept", "application/json"),
    ] {
        req.headers.append(name, value.parse().unwrap());
    }
    text(client.send(req).await.unwrap()).await.unwrap();
    // A `Host` the `Connection` names is the caller's hop's: the origin's goes.
    let mut req = get("/");
    req.headers
        .insert("host", "elsewhere.test".parse().unwrap());
    req.headers.insert("connection", "host".parse().unwrap());
    text(client.send(req).await.unwrap()).await.unwrap();
    let fields = |head: &str| {
        let mut lines: Vec<String> = head.lines().skip(1).map(str::to_string).collect();
        lines.retain(|l| !l.is_empty());
        lines.sort();
        lines
    };
    let heads = server.heads.lock().unwrap().clone();
    let host = format!("host: {}", server.addr);
    let want = |extra: &[&str]| {
        let mut want: Vec<String> = ["authorization: Bearer t", &host]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        want.sort();
        want
    };
    assert_eq!(fields(&heads[0]), want(&["accept: application/json"]));
    assert_eq!(fields(&heads[1]), want(&[]));
    assert_eq!(server.connections(), 1);
}

/// An answer's fields about its connection (RFC 9110 §7.6.1) and those its `Connection`
/// names are not handed on; a chunked body comes without the coding, so without it in
/// `Transfer-Encoding`; `Content-Length` stays. `Connection: close` still closes.
#[tokio::test]
async fn hop_by_hop_answer_fields_are_not_handed_on() {
    let server = Server::start(|_, head| {
        if head.contains("/chunked") {
            reply(&["HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n"])
        } else if head.contains("/gzip") {
            reply(&["HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"])
        } else if head.contains("/close") {
            reply(&["HTTP/1.1 200 OK\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nContent-Length: 2\r\n\r\nok"])
        } else {
            reply(&["HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nTE: trailers\r\nTrailer: X-T\r\nAudit-Id: a\r\nContent-Length: 2\r\n\r\nok"])
        }
    })
    .await;
    let client = server.client();
    let names = |resp: &Response<Body>| {
        let mut names: Vec<&str> = resp.headers().keys().map(|n| n.as_str()).collect();
        names.sort();
        names.join(" ")
    };
    let resp = client.send(get("/")).await.unwrap();
    assert_eq!(names(&resp), "audit-id content-length");
    assert_eq!(resp.headers()["content-length"], "2");
    assert_eq!(text(resp).await.unwrap(), "ok");
    assert_eq!(client.shared.pool.idle(), 1, "kept");

    let resp = client.send(get("/chunked")).await.unwrap();
    assert_eq!(names(&resp), "");
    assert_eq!(text(resp).await.unwrap(), "ok");

    let resp = client.send(get("/gzip")).await.unwrap();
    assert_eq!(resp.headers()["transfer-encoding"], "gzip");
    assert_eq!(text(resp).await.unwrap(), "ok");
    assert_eq!(client.shared.pool.idle(), 1, "kept");

    let resp = client.send(get("/close")).await.unwrap();
    assert_eq!(names(&resp), "content-length");
    assert_eq!(text(resp).await.unwrap(), "ok");
    assert_eq!(client.shared.pool.idle(), 0, "not kept");
    assert_eq!(server.connections(), 1);
}
