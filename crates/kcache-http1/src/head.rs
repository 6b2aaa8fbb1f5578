//! A request's head on the wire, and an answer's head read back (RFC 9112).

use bytes::BytesMut;
use http::header::{
    CONNECTION, CONTENT_LENGTH, HOST, PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};

use crate::pool::Conn;
use crate::Error;

/// The most an answer's head may take; hyper's client allows about as much.
const MAX_HEAD: usize = 64 * 1024;

/// The most header fields an answer's head may have (hyper's client default).
const MAX_HEADERS: usize = 100;

/// Request fields never sent: each concerns the connection to the next hop, not the request,
/// or would announce a body that is not sent.
/// - `Connection`, `Keep-Alive`, `Proxy-Connection`, `TE`, `Transfer-Encoding` and `Upgrade`:
///   the fields RFC 9110 §7.6.1 says an intermediary removes before forwarding, whether or not
///   `Connection` names them (`Upgrade` is refused before this, see [`crate::Client::can_send`]);
///   `Trailer` too: it announces trailer fields, and no request here has a body to end with
///   them (RFC 9110 §6.6.2).
/// - `Proxy-Authorization`: not in §7.6.1's list, but it is credentials for "the next inbound
///   proxy" only (RFC 9110 §11.7.2). This client connects to the origin itself, never through
///   a proxy, so the next hop is always the origin: there the field is a proxy's credentials
///   leaked to a server they are not meant for.
/// - `Content-Length`: the request has no body; a length would announce one (RFC 9110 §8.6:
///   a user agent should not send it then), and a server would take the next request's bytes
///   on the connection for this one's body.
const REQUEST_HOP: [HeaderName; 9] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
    PROXY_AUTHORIZATION,
    CONTENT_LENGTH,
];

/// Answer fields not handed to the caller: `Connection`, `Keep-Alive`, `Proxy-Connection`,
/// `TE` and `Upgrade` concern the connection the answer came on (RFC 9110 §7.6.1), and
/// `Trailer` announces trailer fields, which are read past and not handed on. This client
/// keeps what they say about the connection (`Connection: close`); the caller has no use
/// for them. `Transfer-Encoding` and `Content-Length` are dealt with apart: they say how the
/// body the caller gets is framed.
const ANSWER_HOP: [HeaderName; 6] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    TE,
    TRAILER,
    UPGRADE,
];

/// The request line and header fields of a request without a body. Header values cannot hold
/// a line break (`HeaderValue` refuses one), so none can end the head early.
/// `prefix`: the origin's path, before the request's own (an apiserver behind a gateway that
/// routes by path).
/// Fields about the connection are left out (see [`REQUEST_HOP`]), with those the request's
/// `Connection` names (RFC 9110 §7.6.1): they were meant for the hop the request came over.
pub(crate) fn encode(req: &http::request::Parts, authority: &HeaderValue, prefix: &str) -> Vec<u8> {
    let target = match req.uri.path_and_query().map(|p| p.as_str()) {
        Some(p) if p.starts_with('/') => p,
        _ => "/",
    };
    let named = connection_options(&req.headers);
    let sent = |name: &HeaderName| !REQUEST_HOP.contains(name) && !named.contains(name);
    let mut out =
        Vec::with_capacity(32 + prefix.len() + target.len() + 40 * (req.headers.len() + 1));
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    // Every HTTP/1.1 request has a Host (RFC 9112 §3.2): the caller's, or else the origin's
    // (also when the caller's `Connection` named it as its own hop's).
    if !(req.headers.contains_key(HOST) && sent(&HOST)) {
        field(&mut out, HOST.as_str(), authority);
    }
    for (name, value) in &req.headers {
        if sent(name) {
            field(&mut out, name.as_str(), value);
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// The field names a message's `Connection` lists (RFC 9110 §7.6.1); its other options (such
/// as `close`) name no field a message has, and removing them removes nothing.
fn connection_options(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .filter_map(|t| HeaderName::from_bytes(t.trim_ascii()).ok())
        .collect()
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
    let framing = framing(status, version, &headers, no_body)?;
    // Transfer-Encoding with Content-Length may be an attempt at request smuggling or
    // response splitting; such a connection is closed after the answer (RFC 9112 §6.3,
    // item 3). In HTTP/1.0, Transfer-Encoding means the framing is faulty, and the
    // connection is closed after too (RFC 9112 §6.1): HTTP/1.0 answers are not kept anyway.
    let coded = headers.contains_key(TRANSFER_ENCODING);
    let keep_alive = version == Version::HTTP_11
        && framing != Framing::UntilClose
        && !(coded && headers.contains_key(CONTENT_LENGTH))
        && !has_token(&headers, &CONNECTION, "close");
    hand_on(&mut headers, framing);
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

/// An answer's fields as the caller gets them, once the connection has been dealt with:
/// with `Transfer-Encoding` and `Content-Length` true of the body handed on, and without
/// the fields about the connection ([`ANSWER_HOP`]) and those its `Connection` names
/// (RFC 9110 §7.6.1).
fn hand_on(headers: &mut HeaderMap, framing: Framing) {
    // First, while the fields are as they came: a `Connection` naming one of these does not
    // change how the body was framed.
    if headers.contains_key(TRANSFER_ENCODING) {
        // Transfer-Encoding overrides Content-Length, and an intermediary removes the latter
        // (RFC 9112 §6.3, item 3): the body handed on is not of that length. Without
        // Transfer-Encoding, a `Content-Length` stays: the body is handed on as it came.
        headers.remove(CONTENT_LENGTH);
        // With the chunked coding taken off the body, the field lists the codings left on
        // it. With any other framing the body is handed on with every coding still on it
        // (or, to a HEAD, a 204 or a 304, there is none), as the field says.
        if framing == Framing::Chunked {
            unchunked(headers);
        }
    }
    for name in connection_options(headers) {
        headers.remove(name);
    }
    for name in &ANSWER_HOP {
        headers.remove(name);
    }
}

/// The chunked coding, the last, has been taken off the body: `Transfer-Encoding` lists the
/// others, if any.
fn unchunked(headers: &mut HeaderMap) {
    let mut values = headers.get_all(TRANSFER_ENCODING).iter();
    let only_chunked = matches!(
        (values.next(), values.next()),
        (Some(v), None) if v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"chunked")
    );
    // The apiserver's case, without building the list of codings.
    if only_chunked {
        headers.remove(TRANSFER_ENCODING);
        return;
    }
    let mut codings: Vec<&[u8]> = headers
        .get_all(TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|c| !c.is_empty())
        .collect();
    codings.pop();
    let rest = HeaderValue::from_bytes(&codings.join(&b", "[..])).ok();
    match rest.filter(|r| !r.is_empty()) {
        Some(rest) => {
            headers.insert(TRANSFER_ENCODING, rest);
        }
        None => {
            headers.remove(TRANSFER_ENCODING);
        }
    }
}

/// RFC 9112 §6.3, for a client: no body after HEAD, 1xx, 204 and 304; then
/// `Transfer-Encoding` (chunked last, or to the connection's end; in HTTP/1.0 always to the
/// connection's end); then `Content-Length` (several values must agree); else to the
/// connection's end.
fn framing(
    status: StatusCode,
    version: Version,
    headers: &HeaderMap,
    no_body: bool,
) -> Result<Framing, Error> {
    if no_body
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Framing::Length(0));
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        // HTTP/1.0 has no transfer codings: a client "MUST treat the message as if the
        // framing is faulty, even if a Content-Length is present" (RFC 9112 §6.1). Neither
        // field can be trusted, so the body is what comes until the server closes.
        if version == Version::HTTP_10 {
            return Ok(Framing::UntilClose);
        }
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
