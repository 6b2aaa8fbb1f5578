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

/// A fresh `Audit-Id` value, as the apiserver gives every answer (E6).
pub(super) fn audit_id() -> HeaderValue {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
    HeaderValue::from_str(id).unwrap_or(HeaderValue::from_static("0"))
}

fn base(status: StatusCode, content_type: &'static str) -> http::response::Builder {
    Response::builder()
        .status(status)
        .header("Audit-Id", audit_id())
        .header(header::CACHE_CONTROL, "no-cache, private")
        .header(header::CONTENT_TYPE, content_type)
}

/// A JSON response from body chunks.
pub(super) fn json(status: StatusCode, chunks: Vec<Bytes>) -> Response {
    body(status, "application/json", chunks)
}

/// A protobuf response from body chunks (E9).
pub(super) fn protobuf(status: StatusCode, chunks: Vec<Bytes>) -> Response {
    body(status, crate::protobuf::MEDIA_TYPE, chunks)
}

fn body(status: StatusCode, content_type: &'static str, chunks: Vec<Bytes>) -> Response {
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
    base(status, content_type)
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A streaming JSON response (watches): headers go out at once, chunks as they come.
pub(super) fn stream(body: Body) -> Response {
    stream_as(body, "application/json")
}

/// A streaming response of another media type (protobuf lists and watches).
pub(super) fn stream_as(body: Body, content_type: &'static str) -> Response {
    base(StatusCode::OK, content_type)
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The Status response for an error.
pub(super) fn error(e: &ApiError) -> Response {
    error_as(e, false)
}

/// The Status response for an error, in protobuf when the client asked for protobuf first
/// (the apiserver encodes its Status as it would have encoded the answer: E9).
pub(super) fn error_as(e: &ApiError, protobuf: bool) -> Response {
    let status = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    // The Status as JSON: the body of a JSON answer, and what kcache's audit events say of
    // the answer (`audit::Refusal`) whatever its encoding.
    let json_status = e.body();
    let mut resp = if protobuf {
        self::protobuf(
            status,
            vec![Bytes::from(crate::protobuf::status_envelope(
                &e.to_status(),
            ))],
        )
    } else {
        json(status, vec![json_status.clone()])
    };
    resp.extensions_mut().insert(super::audit::Refusal {
        code: e.code(),
        status: json_status,
    });
    if let Some(secs) = e.retry_after() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if matches!(e, ApiError::Forbidden { .. }) {
        // As the apiserver's 403 (err-anonymous-forbidden-403.http).
        resp.headers_mut().insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
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
pub(super) fn wants_pretty(pretty_param: bool, user_agent: Option<&str>) -> bool {
    pretty_param
        || user_agent.is_some_and(|ua| {
            ua.starts_with("curl") || ua.starts_with("Wget") || ua.starts_with("Mozilla/5.0")
        })
}

/// Re-render a compact JSON body indented by two spaces without the trailing newline, as the
/// apiserver's pretty printer does. Only for humans; machine clients never take this path.
pub(super) fn prettify(chunks: Vec<Bytes>) -> Vec<Bytes> {
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

/// Bodies above this size are gzipped for clients that accept it (E8: 128 KiB, as the
/// apiserver does).
const GZIP_THRESHOLD: usize = 128 * 1024;

/// Whether the client's Accept-Encoding allows gzip.
pub(super) fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.is_some_and(|v| {
        v.split(',').any(|e| {
            let mut parts = e.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let q_zero = parts.any(|p| p.trim().replace(' ', "") == "q=0");
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !q_zero
        })
    })
}

/// Gzip a 200 answer whose body exceeds 128 KiB. The body is read up to the threshold to
/// decide (small bodies keep their framing); above it the rest is compressed as it streams, so
/// a large list never sits in memory whole. Never used for watches (E8: streams stay plain).
pub(super) async fn gzip_if_large(resp: Response) -> Response {
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use http_body_util::BodyExt;
    use std::io::Write;

    if resp.status() != StatusCode::OK {
        return resp;
    }
    let (mut parts, mut body) = resp.into_parts();
    let mut head = Vec::new();
    loop {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    head.extend_from_slice(&data);
                    if head.len() > GZIP_THRESHOLD {
                        break;
                    }
                }
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "reading a response body");
                return error(&ApiError::Internal(e.to_string()));
            }
            // Complete and small: unchanged.
            None => return Response::from_parts(parts, Body::from(head)),
        }
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    parts
        .headers
        .append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    // The apiserver compresses with gzip's fastest level.
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    let _ = encoder.write_all(&head);
    let state = (Some(encoder), body);
    let stream = stream::unfold(state, |(encoder, mut body)| async move {
        let mut encoder = encoder?;
        loop {
            match body.frame().await {
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if encoder.write_all(&data).is_err() {
                        return None;
                    }
                    let out = std::mem::take(encoder.get_mut());
                    if !out.is_empty() {
                        return Some((
                            Ok::<_, std::io::Error>(Bytes::from(out)),
                            (Some(encoder), body),
                        ));
                    }
                }
                Some(Err(e)) => {
                    return Some((Err(std::io::Error::other(e.to_string())), (None, body)))
                }
                None => {
                    let out = encoder.finish().unwrap_or_default();
                    return Some((Ok(Bytes::from(out)), (None, body)));
                }
            }
        }
    });
    Response::from_parts(parts, Body::from_stream(stream))
}
