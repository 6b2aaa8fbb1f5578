//! Pass-through to the upstream for everything the cache does not answer: writes, discovery,
//! subresources, consistent reads, representations the cache does not produce, and protocol
//! upgrades (exec, attach, port-forward). Status and headers come back unchanged and bodies
//! stream both ways.

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderName, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;

use crate::status::ApiError;
use crate::upstream::Upstream;

/// Largest request body forwarded (the apiserver's own limit is 3 MiB).
const MAX_REQUEST_BODY: usize = 3 * 1024 * 1024;

/// Headers that describe one hop, not the request (RFC 9110 §7.6.1), plus the caller's
/// credentials: the upstream sees kcache's identity until caller authentication lands.
fn is_hop_header(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "authorization"
            | "content-length"
    )
}

fn copy_headers(from: &HeaderMap, to: &mut HeaderMap, keep_upgrade: bool) {
    for (name, value) in from {
        let upgrade = name == header::UPGRADE || name == header::CONNECTION;
        if !is_hop_header(name) || (keep_upgrade && upgrade) {
            to.append(name.clone(), value.clone());
        }
    }
}

/// Forward a request to the upstream and stream its answer back.
pub async fn forward(upstream: &Upstream, mut req: Request) -> Response {
    let upgrade = req.headers().contains_key(header::UPGRADE);
    let downstream_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let body = match http_body_util::Limited::new(body, MAX_REQUEST_BODY)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return ApiError::TooLarge(format!(
                "the request body is larger than {MAX_REQUEST_BODY} bytes"
            ))
            .into_response()
        }
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let mut builder = http::Request::builder()
        .method(parts.method.clone())
        .uri(path);
    if let Some(h) = builder.headers_mut() {
        copy_headers(&parts.headers, h, upgrade);
    }
    let Ok(up_req) = builder.body(kube_client::client::Body::from(body.to_vec())) else {
        return ApiError::BadRequest("request cannot be forwarded".into()).into_response();
    };
    let mut resp = match upstream.send(up_req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, %path, "upstream unreachable");
            return ApiError::Unavailable(format!("the upstream API server is unavailable: {e}"))
                .into_response();
        }
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(down) = downstream_upgrade {
            let up = hyper::upgrade::on(&mut resp);
            tokio::spawn(async move {
                if let (Ok(down), Ok(up)) = (down.await, up.await) {
                    let mut down = TokioIo::new(down);
                    let mut up = TokioIo::new(up);
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                }
            });
        }
    }
    let (up_parts, up_body) = resp.into_parts();
    let mut out = Response::builder().status(up_parts.status);
    if let Some(h) = out.headers_mut() {
        copy_headers(
            &up_parts.headers,
            h,
            up_parts.status == StatusCode::SWITCHING_PROTOCOLS,
        );
        // Keep the upstream's Content-Length so small bodies are framed as the upstream framed them.
        if let Some(len) = up_parts.headers.get(header::CONTENT_LENGTH) {
            h.insert(header::CONTENT_LENGTH, len.clone());
        }
    }
    out.body(Body::new(up_body))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}
