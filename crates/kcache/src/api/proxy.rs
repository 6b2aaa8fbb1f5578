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

use crate::auth::{Forward, UserInfo};
use crate::error::Report;
use crate::limits::Limits;
use crate::status::ApiError;
use crate::upstream::{Purpose, Upstream};

/// Headers that describe one hop, not the request (RFC 9110 §7.6.1). `authorization` is
/// handled per [`Forward`] mode.
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

/// Put the caller's identity on a forwarded request: its own token stays (and only that),
/// otherwise no caller credential goes upstream; an x509 caller is impersonated.
fn identify(headers: &mut HeaderMap, how: &Forward) {
    match how {
        Forward::OwnToken => {}
        Forward::AsKcache | Forward::Anonymous => {
            headers.remove(header::AUTHORIZATION);
        }
        Forward::Impersonate(user) => {
            headers.remove(header::AUTHORIZATION);
            impersonate(headers, user);
        }
    }
}

fn impersonate(headers: &mut HeaderMap, user: &UserInfo) {
    let value = |s: &str| http::HeaderValue::from_str(s).ok();
    if let Some(v) = value(&user.username) {
        headers.insert("impersonate-user", v);
    }
    for g in &user.groups {
        // The apiserver adds system:authenticated to impersonated users itself.
        if g == "system:authenticated" {
            continue;
        }
        if let Some(v) = value(g) {
            headers.append("impersonate-group", v);
        }
    }
    if !user.uid.is_empty() {
        if let Some(v) = value(&user.uid) {
            headers.insert("impersonate-uid", v);
        }
    }
    for (key, values) in &user.extra {
        let key = percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC);
        let Ok(name) = HeaderName::from_bytes(format!("impersonate-extra-{key}").as_bytes()) else {
            continue;
        };
        for v in values.iter().filter_map(|v| value(v)) {
            headers.append(name.clone(), v);
        }
    }
}

/// Forward a request to the upstream as `how` says and stream its answer back.
pub async fn forward(
    upstream: &Upstream,
    mut req: Request,
    how: &Forward,
    limits: &Limits,
) -> Response {
    let max_body = limits.max_request_bytes();
    let upgrade = req.headers().contains_key(header::UPGRADE);
    let downstream_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let max_body = if max_body == 0 { usize::MAX } else { max_body };
    // Most forwarded requests (reads) have no body: nothing to gather.
    let body = if http_body::Body::is_end_stream(&body) {
        Ok(bytes::Bytes::new())
    } else {
        http_body_util::Limited::new(body, max_body)
            .collect()
            .await
            .map(|b| b.to_bytes())
    };
    let body = match body {
        Ok(b) => b,
        Err(_) => {
            // A body without Content-Length is caught here, while being read; count it with
            // the ones refused up front.
            limits.count_limited("request_size");
            return ApiError::TooLarge(format!("the request body is larger than {max_body} bytes"))
                .into_response();
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
        identify(h, how);
    }
    let Ok(up_req) = builder.body(kube_client::client::Body::from(body)) else {
        return ApiError::BadRequest("request cannot be forwarded".into()).into_response();
    };
    let sent = match how {
        Forward::AsKcache | Forward::Impersonate(_) => {
            upstream.send(up_req, Purpose::PassThrough).await
        }
        Forward::OwnToken | Forward::Anonymous => {
            upstream.send_bare(up_req, Purpose::PassThrough).await
        }
    };
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %Report(&e), %path, "upstream unreachable");
            return ApiError::from(e).into_response();
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
