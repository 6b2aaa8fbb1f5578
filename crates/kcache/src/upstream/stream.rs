//! Splitting an upstream watch body into events without copying object bytes.

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{CountedBody, UpstreamError};

/// Newline-delimited JSON documents from a streaming response body.
pub(crate) struct LineStream {
    body: CountedBody,
    buf: BytesMut,
    done: bool,
}

impl LineStream {
    pub(crate) fn new(body: CountedBody) -> LineStream {
        LineStream {
            body,
            buf: BytesMut::new(),
            done: false,
        }
    }

    /// The next complete line (without its newline); `None` at the end of the stream.
    pub(crate) async fn next_line(&mut self) -> Result<Option<Bytes>, UpstreamError> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(pos + 1).freeze();
                let line = line.slice(..pos);
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some(line));
            }
            if self.done {
                if self.buf.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                // A last document without a newline.
                return Ok(Some(self.buf.split().freeze()));
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Err(UpstreamError::Body(e)),
                None => self.done = true,
            }
        }
    }
}

/// One decoded watch event; `object` shares the line's bytes.
#[derive(Debug)]
pub(crate) struct WatchLine {
    pub ty: String,
    pub object: Bytes,
}

impl WatchLine {
    pub(crate) fn parse(line: &Bytes) -> Result<WatchLine, UpstreamError> {
        #[derive(Deserialize)]
        struct Raw<'a> {
            #[serde(rename = "type")]
            ty: String,
            #[serde(borrow)]
            object: &'a RawValue,
        }
        let raw: Raw<'_> =
            serde_json::from_slice(line).map_err(UpstreamError::decode("watch event"))?;
        let object = line.slice_ref(raw.object.get().as_bytes());
        Ok(WatchLine { ty: raw.ty, object })
    }
}

/// What the reflector needs from a BOOKMARK or ERROR object.
#[derive(Debug, Deserialize, Default)]
pub(crate) struct MetaOnly {
    #[serde(default)]
    pub metadata: MetaFields,
    #[serde(default)]
    pub code: Option<u16>,
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
pub(crate) struct MetaFields {
    #[serde(rename = "resourceVersion", default)]
    pub resource_version: Option<String>,
    #[serde(default)]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
}
