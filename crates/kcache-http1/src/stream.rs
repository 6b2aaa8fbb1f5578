//! Where a client connects, and the byte stream of one connection (TCP, or TLS over TCP).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderValue;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::Error;

/// The origin a client sends to: the host and port it connects to, the `Host` header it
/// sends, and for `https` the TLS settings and the name the certificate is checked against.
pub(crate) struct Origin {
    host: String,
    /// The origin's path without its trailing slash, put before every request's path.
    prefix: String,
    port: u16,
    authority: HeaderValue,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl Origin {
    pub(crate) fn new(
        uri: &http::Uri,
        tls: Option<Arc<rustls::ClientConfig>>,
        server_name: Option<&str>,
    ) -> Result<Origin, Error> {
        let bad = || Error::Origin(uri.to_string());
        let authority = uri.authority().ok_or_else(bad)?;
        let secure = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad()),
        };
        // An IPv6 literal is bracketed in a URI, not in a socket address or a server name.
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = authority
            .port_u16()
            .unwrap_or(if secure { 443 } else { 80 });
        let tls = match (secure, tls) {
            (false, _) => None,
            (true, None) => return Err(Error::Origin(format!("{uri}: no TLS settings"))),
            (true, Some(config)) => {
                let name = server_name.unwrap_or(&host).to_string();
                let name =
                    ServerName::try_from(name.clone()).map_err(|_| Error::ServerName(name))?;
                Some((TlsConnector::from(config), name))
            }
        };
        Ok(Origin {
            prefix: uri.path().trim_end_matches('/').to_string(),
            authority: HeaderValue::from_str(authority.as_str()).map_err(|_| bad())?,
            host,
            port,
            tls,
        })
    }

    /// The origin's path, put before every request's path (empty for `/`).
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The `Host` header's value.
    pub(crate) fn authority(&self) -> &HeaderValue {
        &self.authority
    }
}

/// One connection's bytes.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// A new connection to `origin`, within `timeout` for the TCP connection.
    pub(crate) async fn connect(
        origin: &Origin,
        timeout: Option<Duration>,
    ) -> Result<Stream, Error> {
        let target = || format!("{}:{}", origin.host, origin.port);
        let connecting = TcpStream::connect((origin.host.as_str(), origin.port));
        let tcp = match timeout {
            Some(t) => tokio::time::timeout(t, connecting)
                .await
                .map_err(|_| Error::ConnectTimeout(target(), t))?,
            None => connecting.await,
        }
        .map_err(|e| Error::Connect(target(), e))?;
        // A request goes out in one write; waiting to coalesce it with more only delays it.
        tcp.set_nodelay(true)
            .map_err(|e| Error::Connect(target(), e))?;
        match &origin.tls {
            None => Ok(Stream::Tcp(tcp)),
            Some((connector, name)) => connector
                .connect(name.clone(), tcp)
                .await
                .map(|tls| Stream::Tls(Box::new(tls)))
                .map_err(|e| Error::Connect(target(), e)),
        }
    }

    /// Whether nothing waits to be read on the connection's socket: no byte and not the
    /// peer's close. Asked of the kernel (a peek, which leaves the bytes where they are):
    /// tokio's own readiness is what its reactor was last told, and it may not have been told
    /// yet of bytes that arrived while the connection was idle. Over TLS these are records
    /// not yet decrypted; which ones they are does not matter, the connection is not reused.
    pub(crate) fn quiet(&self) -> bool {
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit()];
        matches!(
            socket2::SockRef::from(self.tcp()).peek(&mut probe),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock
        )
    }

    /// The TCP connection, under TLS if any.
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        }
    }

    /// Block the thread until a byte or the peer's close waits on the socket, behind tokio's
    /// back: its reactor is not told (a test's way to have bytes arrive that it has not seen).
    #[cfg(test)]
    pub(crate) fn block_until_readable(&self) {
        let socket = socket2::SockRef::from(self.tcp());
        socket.set_nonblocking(false).unwrap();
        let _ = socket.peek(&mut [std::mem::MaybeUninit::<u8>::uninit()]);
        socket.set_nonblocking(true).unwrap();
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
