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

use super::App;
use crate::auth::{Forward, UserInfo};
use crate::error::Report;
use crate::status::ApiError;
use crate::upstream::Purpose;

/// Headers that describe one hop, not the request or answer (RFC 9110 §7.6.1), and `host`.
/// `authorization` is handled per [`Forward`] mode; a request's `content-length` is the
/// client's to set for the body it sends.
const HOP_HEADERS: [HeaderName; 10] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HOST,
];

/// Remove the hop's headers from a request or answer passed on, in place (the map is passed
/// on, not copied); `keep_upgrade` keeps `Upgrade` and `Connection` for a protocol upgrade.
fn strip_hop_headers(headers: &mut HeaderMap, keep_upgrade: bool) {
    for name in &HOP_HEADERS {
        if keep_upgrade && (name == header::UPGRADE || name == header::CONNECTION) {
            continue;
        }
        headers.remove(name);
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

/// Forward a request to the upstream as `how` says and stream its answer back. An upgraded
/// connection (exec, attach, port-forward) is copied both ways in a task of `app.tasks`.
pub(crate) async fn forward(app: &App, mut req: Request, how: &Forward) -> Response {
    let upstream = &app.upstream;
    let max_body = app.limits.max_request_bytes();
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
            app.limits.count_limited("request_size");
            return ApiError::TooLarge(format!("the request body is larger than {max_body} bytes"))
                .into_response();
        }
    };
    let uri = parts.uri.clone();
    // The caller's header map goes upstream as it is, less the hop's headers; the URI is the
    // caller's origin-form path and query, which the client joins with the cluster URL.
    let mut headers = parts.headers;
    strip_hop_headers(&mut headers, upgrade);
    headers.remove(header::CONTENT_LENGTH);
    identify(&mut headers, how);
    let mut up_req = http::Request::new(kube_client::client::Body::from(body));
    *up_req.method_mut() = parts.method;
    *up_req.uri_mut() = parts.uri;
    *up_req.headers_mut() = headers;
    if long_running(&uri) {
        // A watch or a followed log may wait for its answer's head as long as the upstream
        // takes (a kubelet sends a log's head with its first line): no head timeout.
        up_req
            .extensions_mut()
            .insert(kcache_http1::HeadTimeoutOverride(None));
    }
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
            tracing::warn!(error = %Report(&e), %uri, "upstream unreachable");
            return ApiError::from(e).into_response();
        }
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(down) = downstream_upgrade {
            let up = hyper::upgrade::on(&mut resp);
            app.tasks.spawn(async move {
                if let (Ok(down), Ok(up)) = (down.await, up.await) {
                    let mut down = TokioIo::new(down);
                    let mut up = TokioIo::new(up);
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                }
            });
        }
    }
    let (up_parts, up_body) = resp.into_parts();
    let switching = up_parts.status == StatusCode::SWITCHING_PROTOCOLS;
    // The upstream's Content-Length stays, so small bodies are framed as the upstream framed
    // them.
    let mut headers = up_parts.headers;
    strip_hop_headers(&mut headers, switching);
    let mut out = Response::new(Body::new(up_body));
    *out.status_mut() = up_parts.status;
    *out.headers_mut() = headers;
    out
}

/// Whether a request is answered by a stream that may start late: a watch (by its query or
/// the legacy `/watch/` path) or a followed log.
fn long_running(uri: &http::Uri) -> bool {
    let flag = |name: &str| {
        uri.query().is_some_and(|q| {
            q.split('&').any(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                k == name && !matches!(v, "0" | "false" | "False" | "FALSE")
            })
        })
    };
    uri.path().contains("/watch/") || flag("watch") || flag("follow")
}
