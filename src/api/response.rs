//! Building responses with the apiserver's headers (E6, E7): `Audit-Id`, `Cache-Control:
//! no-cache, private`, `Content-Type: application/json`; `Content-Length` for bodies under
//! 2 KiB and chunked streaming above, as Go's net/http does.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::stream;
use http::{header, HeaderValue, StatusCode};

use crate::status::ApiError;

/// Bodies under this size carry Content-Length; larger ones are chunked.
const SMALL_BODY: usize = 2048;

fn base(status: StatusCode) -> http::response::Builder {
    Response::builder()
        .status(status)
        .header("Audit-Id", uuid::Uuid::new_v4().to_string())
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header(header::CONTENT_TYPE, "application/json")
}

/// A JSON response from body chunks.
pub fn json(status: StatusCode, chunks: Vec<Bytes>) -> Response {
    let len: usize = chunks.iter().map(Bytes::len).sum();
    let body = if len < SMALL_BODY {
        let mut all = Vec::with_capacity(len);
        for c in &chunks {
            all.extend_from_slice(c);
        }
        Body::from(all)
    } else {
        Body::from_stream(stream::iter(
            chunks.into_iter().map(Ok::<_, std::convert::Infallible>),
        ))
    };
    base(status)
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A streaming JSON response (watches): headers go out at once, chunks as they come.
pub fn stream(body: Body) -> Response {
    base(StatusCode::OK)
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The Status response for an error.
pub fn error(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json(status, vec![e.body()]);
    if let Some(secs) = e.retry_after() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(&self)
    }
}

/// Whether the apiserver would pretty-print for this request: `?pretty=true`, or a User-Agent
/// of curl, Wget or a browser (E-rules, `list-cm-ns-b-curl-useragent-pretty`).
pub fn wants_pretty(pretty_param: bool, user_agent: Option<&str>) -> bool {
    pretty_param
        || user_agent.is_some_and(|ua| {
            ua.starts_with("curl") || ua.starts_with("Wget") || ua.starts_with("Mozilla/5.0")
        })
}

/// Re-render a compact JSON body indented by two spaces without the trailing newline, as the
/// apiserver's pretty printer does. Only for humans; machine clients never take this path.
pub fn prettify(chunks: Vec<Bytes>) -> Vec<Bytes> {
    let mut all = Vec::new();
    for c in &chunks {
        all.extend_from_slice(c);
    }
    match serde_json::from_slice::<serde_json::Value>(&all)
        .ok()
        .and_then(|v| serde_json::to_vec_pretty(&v).ok())
    {
        Some(p) => vec![Bytes::from(p)],
        None => chunks,
    }
}
