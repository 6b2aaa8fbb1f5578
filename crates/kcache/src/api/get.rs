//! GET of one object from the cache (G1, G2, L6).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;

use super::policy::Want;
use super::{protobuf, response, Answer, Form};
use crate::cache::ResourceCache;
use crate::status::ApiError;
use crate::table;

/// Answer a GET of `key` (`ns/name` or `name`) with the state `want` names (as the policy
/// decided it), or say it must go upstream.
pub(super) async fn get(
    cache: &Arc<ResourceCache>,
    key: &str,
    name: &str,
    want: &Want,
    rv_wait: Duration,
    form: Form<'_>,
) -> Result<Answer, ApiError> {
    match want {
        Want::Latest { .. } => {}
        Want::NotOlderThan { rv, otherwise, .. } => {
            if let Err(current) = cache.wait_for_rv(*rv, rv_wait).await {
                return otherwise.answer(ApiError::TooLargeResourceVersion {
                    requested: *rv,
                    current,
                });
            }
        }
        // Not a GET's: the upstream answers whatever asked this.
        _ => return Ok(Answer::Upstream),
    }
    let snap = cache.snapshot();
    let Some(obj) = snap.objects.get(key) else {
        // A cache restricted by selectors may not hold an object the upstream has.
        if !cache.scope.label.is_empty() || !cache.scope.field.is_empty() {
            return Ok(Answer::Upstream);
        }
        return Err(ApiError::NotFound {
            group: cache.info.group.clone(),
            resource: cache.info.resource.clone(),
            name: name.to_string(),
        });
    };
    let chunks = match form {
        Form::Protobuf(mirror) => {
            let versions = [obj.rv];
            return Ok(
                match mirror.wait_all(&versions, protobuf::MIRROR_WAIT).await {
                    Some(found) => Answer::Ready(protobuf::object(&cache.info, &found[0])),
                    None => Answer::Upstream,
                },
            );
        }
        Form::Json { pretty } => {
            let chunks = vec![obj.raw_bytes(), Bytes::from_static(b"\n")];
            if pretty {
                response::prettify(chunks)
            } else {
                chunks
            }
        }
        Form::Table { printer, include } => {
            vec![printer.get_table(obj.raw(), include, std::time::SystemTime::now())]
        }
        Form::Metadata => vec![
            table::partial_object_metadata(obj.raw()),
            Bytes::from_static(b"\n"),
        ],
    };
    Ok(Answer::Ready(response::json(StatusCode::OK, chunks)))
}
