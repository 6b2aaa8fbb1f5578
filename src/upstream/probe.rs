//! What resourceVersion a consistent read must see, learnt cheaply and once for many readers.
//!
//! A consistent read (LIST/GET with resourceVersion unset) must reflect every write the upstream
//! completed before it. kcache learns the upstream's current revision `P` with the cheapest
//! consistent request there is (a one-item list, answered from etcd). A cache RV at or above `P`
//! is then enough. The cache RV only moves with events of its own type, though, and `P` moves
//! with writes to any type, so a quiet resource would never reach it: in that case kcache also
//! asks the upstream's watch cache for the type's newest RV `T` (a `resourceVersion=0` one-item
//! list) and needs only `min(P, T)` — there is nothing of this type newer than `T` to wait for.
//!
//! Probes are coalesced: at most one is in flight per resource, and every read that arrives
//! while it runs joins the next one, which is sent when the current one returns. Under load
//! that is one probe per upstream round trip, whatever the read rate.

use std::sync::{Arc, Mutex};

use serde::Deserialize;
use tokio::sync::oneshot;

use super::{Upstream, UpstreamError};
use crate::cache::ResourceCache;

type Waiter = oneshot::Sender<Result<u64, String>>;

#[derive(Default)]
struct State {
    running: bool,
    waiting: Vec<Waiter>,
}

/// The consistent-read probe of one cached resource.
pub struct RvProbe {
    upstream: Upstream,
    cache: Arc<ResourceCache>,
    /// The collection URL the reflector lists (namespaced when the cache is).
    collection: String,
    state: Mutex<State>,
}

impl RvProbe {
    pub fn new(upstream: Upstream, cache: Arc<ResourceCache>, collection: String) -> Arc<RvProbe> {
        Arc::new(RvProbe {
            upstream,
            cache,
            collection,
            state: Mutex::new(State::default()),
        })
    }

    /// The RV the cache must reach before it may answer a consistent read that starts now.
    pub async fn target(self: &Arc<Self>) -> Result<u64, String> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            st.waiting.push(tx);
            !std::mem::replace(&mut st.running, true)
        };
        if start {
            tokio::spawn(self.clone().run());
        }
        rx.await.unwrap_or_else(|_| Err("probe task ended".into()))
    }

    /// Send probes while readers are waiting; each batch gets the answer of one probe sent
    /// after all of them arrived.
    async fn run(self: Arc<Self>) {
        loop {
            let batch = {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.waiting.is_empty() {
                    st.running = false;
                    return;
                }
                std::mem::take(&mut st.waiting)
            };
            let result = self.probe().await.map_err(|e| e.to_string());
            for w in batch {
                let _ = w.send(result.clone());
            }
        }
    }

    async fn probe(&self) -> Result<u64, UpstreamError> {
        let p = self.list_rv("limit=1").await?;
        if self.cache.rv() >= p {
            return Ok(p);
        }
        let t = self.list_rv("limit=1&resourceVersion=0").await?;
        Ok(p.min(t))
    }

    async fn list_rv(&self, query: &str) -> Result<u64, UpstreamError> {
        #[derive(Deserialize)]
        struct Head {
            metadata: super::ListMeta,
        }
        let url = format!("{}?{query}", self.collection);
        let body = self.upstream.get(&url).await?;
        let head: Head = serde_json::from_slice(&body)
            .map_err(|e| UpstreamError::Decode(format!("list of {}: {e}", self.collection)))?;
        head.metadata.resource_version.parse().map_err(|_| {
            UpstreamError::Decode(format!("list of {}: resourceVersion", self.collection))
        })
    }
}
