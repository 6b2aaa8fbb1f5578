//! `kcache status`: the admin listener's `/status` report of a running kcache, fetched as JSON
//! and printed as the same aligned table its `/status` gives `curl` (see
//! `kcache::api::admin::status`).

use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use kcache::api::admin::status::{text, StatusReport};
use tokio::net::TcpStream;

/// How long the whole exchange may take: the admin listener answers at once, unless the
/// process is stuck, which is then worth saying.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why the report could not be had.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error(
        "--admin {url}: an http://HOST:PORT URL is expected (the admin listener is plain HTTP)"
    )]
    Url { url: String },
    #[error("cannot reach kcache's admin endpoint at {url} (is kcache running, with adminListen there?)")]
    Connect {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("kcache's admin endpoint at {url} did not answer within {}s", TIMEOUT.as_secs())]
    Timeout { url: String },
    #[error("asking {url}/status")]
    Http {
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("{url}/status answered {status}: {body}")]
    Status {
        url: String,
        status: StatusCode,
        body: String,
    },
    #[error("{url}/status did not answer with a status report (another program on that port, or another kcache version?)")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Fetch the report of the kcache whose admin listener is at `admin` and print it.
pub async fn run(admin: &str) -> Result<(), StatusError> {
    let report = fetch(admin).await?;
    print!("{}", text::render(&report));
    Ok(())
}

/// The report of the kcache whose admin listener is at `admin` (`http://HOST:PORT`).
pub async fn fetch(admin: &str) -> Result<StatusReport, StatusError> {
    let url = admin.trim_end_matches('/').to_string();
    match tokio::time::timeout(TIMEOUT, get_json(&url)).await {
        Ok(r) => r,
        Err(_) => Err(StatusError::Timeout { url }),
    }
}

async fn get_json(url: &str) -> Result<StatusReport, StatusError> {
    let bad_url = || StatusError::Url {
        url: url.to_string(),
    };
    let uri: Uri = url.parse().map_err(|_| bad_url())?;
    if uri.scheme_str() != Some("http") {
        return Err(bad_url());
    }
    let authority = uri.authority().ok_or_else(bad_url)?.clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(80);
    let stream = TcpStream::connect((host, port))
        .await
        .map_err(|source| StatusError::Connect {
            url: url.to_string(),
            source,
        })?;
    let http = |source| StatusError::Http {
        url: url.to_string(),
        source,
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(http)?;
    tokio::spawn(conn);
    // A path below the URL's own, so an admin listener behind a path prefix works too.
    let path = format!("{}/status?format=json", uri.path().trim_end_matches('/'));
    let req = Request::get(path)
        .header(header::HOST, authority.as_str())
        .header(header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|_| bad_url())?;
    let resp = sender.send_request(req).await.map_err(http)?;
    let status = resp.status();
    let body = resp.into_body().collect().await.map_err(http)?.to_bytes();
    if !status.is_success() {
        return Err(StatusError::Status {
            url: url.to_string(),
            status,
            body: String::from_utf8_lossy(&body)
                .trim()
                .chars()
                .take(200)
                .collect(),
        });
    }
    serde_json::from_slice(&body).map_err(|source| StatusError::Decode {
        url: url.to_string(),
        source,
    })
}
