//! A request's head on the wire, and an answer's head read back (RFC 9112).

use bytes::BytesMut;
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};

use crate::pool::Conn;
use crate::Error;

/// The most an answer's head may take; hyper's client allows about as much.
const MAX_HEAD: usize = 64 * 1024;

/// The most header fields an answer's head may have (hyper's client default).
const MAX_HEADERS: usize = 100;

/// The request line and header fields of a request without a body. Header values cannot hold
/// a line break (`HeaderValue` refuses one), so none can end the head early.
/// `prefix`: the origin's path, before the request's own (an apiserver behind a gateway that
/// routes by path).
pub(crate) fn encode(req: &http::request::Parts, authority: &HeaderValue, prefix: &str) -> Vec<u8> {
    let target = match req.uri.path_and_query().map(|p| p.as_str()) {
        Some(p) if p.starts_with('/') => p,
        _ => "/",
    };
    let mut out =
        Vec::with_capacity(32 + prefix.len() + target.len() + 40 * (req.headers.len() + 1));
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if !req.headers.contains_key(HOST) {
        field(&mut out, HOST.as_str(), authority);
    }
    for (name, value) in &req.headers {
        field(&mut out, name.as_str(), value);
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn field(out: &mut Vec<u8>, name: &str, value: &HeaderValue) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// How an answer's body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// After this many bytes (none: an answer to HEAD, a 204 or a 304).
    Length(u64),
    /// With the chunked transfer coding's last chunk.
    Chunked,
    /// When the server closes the connection.
    UntilClose,
}

/// An answer's head: its status and header fields, how its body ends, and whether the
/// connection may carry another request after it.
pub(crate) struct Head {
    pub(crate) parts: http::response::Parts,
    pub(crate) framing: Framing,
    pub(crate) keep_alive: bool,
}

/// A failure to read an answer's head, and whether any of it had arrived.
pub(crate) struct ReadError {
    pub(crate) error: Error,
    pub(crate) started: bool,
}

/// Read one answer's head from `conn`, leaving what follows it in the connection's buffer.
/// `no_body`: the request was a HEAD, so the answer has no body whatever its fields say.
pub(crate) async fn read(
    conn: &mut Conn,
    read_size: usize,
    no_body: bool,
) -> Result<Head, ReadError> {
    loop {
        if !conn.buf.is_empty() {
            let started = |error| ReadError {
                error,
                started: true,
            };
            if let Some(head) = split_head(&mut conn.buf, no_body).map_err(started)? {
                return Ok(head);
            }
            if conn.buf.len() > MAX_HEAD {
                return Err(started(Error::Malformed(format!(
                    "an answer's head is longer than {MAX_HEAD} bytes"
                ))));
            }
        }
        let started = !conn.buf.is_empty();
        match std::future::poll_fn(|cx| conn.poll_fill(cx, read_size)).await {
            Ok(0) => {
                return Err(ReadError {
                    error: Error::Closed,
                    started,
                })
            }
            Ok(_) => {}
            Err(e) => {
                return Err(ReadError {
                    error: e.into(),
                    started,
                })
            }
        }
    }
}

fn parse_error(e: httparse::Error) -> Error {
    Error::Malformed(format!("an answer's head: {e}"))
}

/// The answer's head at the start of `buf`, split off it, once all of it has arrived. It is
/// parsed once; header values share the head's bytes instead of being copied one by one.
fn split_head(buf: &mut BytesMut, no_body: bool) -> Result<Option<Head>, Error> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut answer = httparse::Response::new(&mut fields);
    let len = match answer.parse(buf).map_err(parse_error)? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => return Ok(None),
    };
    let code = answer.code.unwrap_or_default();
    let status =
        StatusCode::from_u16(code).map_err(|_| Error::Malformed(format!("status code {code}")))?;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(Error::Malformed(
            "101 Switching Protocols to a request that did not ask".into(),
        ));
    }
    let version = match answer.version {
        Some(1) => Version::HTTP_11,
        _ => Version::HTTP_10,
    };
    // Each value's place in the head, to cut it from the head's bytes once they are split off.
    let base = buf.as_ptr() as usize;
    let mut fields = Vec::with_capacity(answer.headers.len());
    for f in answer.headers.iter() {
        let name = HeaderName::from_bytes(f.name.as_bytes())
            .map_err(|_| Error::Malformed(format!("header name {:?}", f.name)))?;
        let start = (f.value.as_ptr() as usize).wrapping_sub(base);
        let place = if f.value.is_empty() || start + f.value.len() > len {
            0..0
        } else {
            start..start + f.value.len()
        };
        fields.push((name, place));
    }
    let bytes = buf.split_to(len).freeze();
    let mut headers = HeaderMap::with_capacity(fields.len());
    for (name, place) in fields {
        let value = HeaderValue::from_maybe_shared(bytes.slice(place))
            .map_err(|_| Error::Malformed(format!("value of header {name}")))?;
        headers.append(name, value);
    }
    let framing = framing(status, &headers, no_body)?;
    let keep_alive = version == Version::HTTP_11
        && framing != Framing::UntilClose
        && !has_token(&headers, &CONNECTION, "close");
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status = status;
    parts.version = version;
    parts.headers = headers;
    Ok(Some(Head {
        parts,
        framing,
        keep_alive,
    }))
}

/// RFC 9112 §6.3, for a client: no body after HEAD, 1xx, 204 and 304; then
/// `Transfer-Encoding` (chunked last, or to the connection's end); then `Content-Length`
/// (several values must agree); else to the connection's end.
fn framing(status: StatusCode, headers: &HeaderMap, no_body: bool) -> Result<Framing, Error> {
    if no_body
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Length(0));
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        let last = headers
            .get_all(TRANSFER_ENCODING)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(<[u8]>::trim_ascii)
            .rfind(|c| !c.is_empty());
        return Ok(match last {
            Some(c) if c.eq_ignore_ascii_case(b"chunked") => Framing::Chunked,
            _ => Framing::UntilClose,
        });
    }
    let mut length = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        for part in value.as_bytes().split(|b| *b == b',') {
            let n = std::str::from_utf8(part.trim_ascii())
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| Error::Malformed("Content-Length".into()))?;
            if length.is_some_and(|l| l != n) {
                return Err(Error::Malformed("Content-Length values differ".into()));
            }
            length = Some(n);
        }
    }
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}
