//! The upstream kube-apiserver, reached through kube-client: raw requests (kcache keeps the
//! upstream's bytes, so it never decodes objects into typed structs), discovery of the cached
//! resource types, and one reflector per type.

mod client;
mod cost;
mod metadata_list;
mod mirror;
mod probe;
mod reflector;
mod stream;
mod version;

pub(crate) use cost::CountedBody;
pub use cost::Purpose;
pub(crate) use metadata_list::metadata_list_url;
pub use metadata_list::{ItemVersion, MetadataList, METADATA_LIST_ACCEPT};
pub(crate) use mirror::MirrorReflector;

pub(crate) use probe::RevisionProbe;
pub(crate) use reflector::{Ended, Reflector};
pub use reflector::{ReflectorConfig, StreamingList};
pub(crate) use stream::{LineStream, WatchLine};
pub(crate) use version::UpstreamVersion;

use std::path::PathBuf;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube_client::client::Body;
use kube_client::config::{KubeConfigOptions, Kubeconfig};
use kube_client::Config;
use serde::Deserialize;

use crate::cache::ResourceCache;
use crate::metrics::Metrics;
use crate::resource::ResourceInfo;
use client::{transport_error, Clients};

/// The query parameters restricting what is cached of a type (its scope), pre-encoded, for
/// the lists and watches of its reflectors.
fn scope_query(cache: &ResourceCache) -> String {
    let mut q = String::new();
    if !cache.scope.label.is_empty() {
        q.push_str(&format!(
            "&labelSelector={}",
            enc(&cache.scope.label.to_string())
        ));
    }
    if !cache.scope.field.is_empty() {
        q.push_str(&format!(
            "&fieldSelector={}",
            enc(&cache.scope.field.to_string())
        ));
    }
    q
}

/// A query parameter value, percent-encoded.
pub(crate) fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// How long kcache waits for the upstream to answer one of its own requests by default.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The collection URL kcache lists and watches for a cache: namespaced when the cache is
/// restricted to one namespace.
pub(crate) fn collection_path(cache: &ResourceCache) -> String {
    let info = &cache.info;
    let namespace = cache.scope.namespace.as_deref().filter(|_| info.namespaced);
    collection_url(&info.api_path(), &info.resource, namespace)
}

/// The collection URL of `resource` under `api_path` (see [`crate::resource::api_path`]), in
/// `namespace` when given.
pub(crate) fn collection_url(api_path: &str, resource: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!(
            "{api_path}/namespaces/{}/{resource}",
            percent_encoding::utf8_percent_encode(ns, percent_encoding::NON_ALPHANUMERIC),
        ),
        None => format!("{api_path}/{resource}"),
    }
}

/// Failures talking to the upstream. Each keeps the error it comes from as its
/// [`source`](std::error::Error::source) (see [`crate::error::Report`] to show the chain);
/// [`crate::status`] decides what a client is told.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Neither a kubeconfig file nor an in-cluster service account (the source says why the
    /// latter is not usable).
    #[error("no kubeconfig found (looked at --kubeconfig, $KUBECONFIG, ~/.kube/config and the in-cluster service account); run `kcache demo` to try kcache against its built-in simulated cluster")]
    NoKubeconfig(#[source] kube_client::config::InClusterError),
    /// A kubeconfig file that cannot be read or parsed.
    #[error("kubeconfig: {path}")]
    KubeconfigFile {
        path: PathBuf,
        #[source]
        source: kube_client::config::KubeconfigError,
    },
    /// A kubeconfig that cannot be used (no such context, bad cluster entry, …).
    #[error("kubeconfig")]
    Kubeconfig(#[source] kube_client::config::KubeconfigError),
    /// An upstream URL that does not parse.
    #[error("kubeconfig: {url}")]
    Url {
        url: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The client could not be built, or the request did not get an answer.
    #[error("upstream request failed")]
    Transport(#[from] kube_client::Error),
    /// kcache's own request could not be built.
    #[error("building the upstream request")]
    Request(#[source] http::Error),
    /// The answer's body broke off.
    #[error("reading the upstream response")]
    Body(#[source] kube_client::Error),
    /// A streaming list ended before its initial events did.
    #[error("reading the upstream response: stream ended before the initial events")]
    Truncated,
    #[error("upstream answered {code}: {message}")]
    Status { code: u16, message: String },
    /// JSON that does not have the shape kcache reads (`what`: which answer).
    #[error("upstream sent something kcache cannot read: {what}")]
    Decode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// An object kcache cannot cache (`what`: its resource).
    #[error("upstream sent something kcache cannot read: {what}")]
    Object {
        what: String,
        #[source]
        source: crate::object::ObjectError,
    },
    /// Protobuf that does not have the shape kcache reads (`what`: which answer).
    #[error("upstream sent something kcache cannot read: {what}")]
    Protobuf {
        what: String,
        #[source]
        source: crate::protobuf::ProtoError,
    },
    /// A well-formed answer that says something kcache cannot use (`0`: what).
    #[error("upstream sent something kcache cannot read: {0}")]
    Malformed(String),
    #[error("resource {0} is not served by the upstream (discovery)")]
    UnknownResource(String),
    /// Discovery gives the resource no `list` or no `watch` verb: it cannot be cached.
    #[error("resource {0} cannot be listed and watched (discovery)")]
    NotListable(String),
    #[error("no answer from the upstream within {0:?}")]
    Timeout(std::time::Duration),
}

impl UpstreamError {
    /// A JSON answer that does not decode, for `map_err`.
    pub(crate) fn decode(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> Self {
        let what = what.into();
        move |source| UpstreamError::Decode { what, source }
    }

    /// The HTTP code the upstream answered with, if it answered.
    pub(crate) fn code(&self) -> Option<u16> {
        match self {
            UpstreamError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// A handle on the upstream API server.
#[derive(Clone)]
pub struct Upstream {
    /// With kcache's own credentials.
    client: Clients,
    /// The same connection settings with no credentials at all: pass-through of a caller's
    /// own bearer token, and of anonymous callers, must not carry kcache's identity as well.
    bare: Clients,
    /// Where it is, for logs.
    pub url: String,
    /// Bound on kcache's own requests (list pages, probes, a watch's response head): an
    /// upstream that accepts connections but never answers must not stall a reflector or the
    /// consistent reads waiting on a probe forever.
    request_timeout: std::time::Duration,
    /// Where requests and bytes are counted by purpose (None until a server owns this
    /// handle: see [`Upstream::with_metrics`]).
    cost: Option<std::sync::Arc<cost::Counters>>,
    /// The upstream's version and the forms learnt from its answers.
    version: UpstreamVersion,
}

impl Upstream {
    /// Connect with a kubeconfig: the given path, else `$KUBECONFIG`, else `~/.kube/config`,
    /// else the in-cluster service account.
    pub async fn from_kubeconfig(
        path: Option<PathBuf>,
        context: Option<String>,
    ) -> Result<Upstream, UpstreamError> {
        let options = KubeConfigOptions {
            context,
            ..Default::default()
        };
        let env_path = std::env::var_os("KUBECONFIG").map(PathBuf::from);
        let home_path = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube/config"));
        let file = path
            .or(env_path)
            .or_else(|| home_path.filter(|p| p.exists()));
        let config = match file {
            Some(file) => {
                let kc = Kubeconfig::read_from(&file)
                    .map_err(|source| UpstreamError::KubeconfigFile { path: file, source })?;
                Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(UpstreamError::Kubeconfig)?
            }
            None => Config::incluster().map_err(UpstreamError::NoKubeconfig)?,
        };
        Self::from_config(config)
    }

    /// Connect to a plain-HTTP API server without credentials (the simulated cluster).
    pub fn from_url(url: &str) -> Result<Upstream, UpstreamError> {
        let uri = url.parse().map_err(|source| UpstreamError::Url {
            url: url.to_string(),
            source,
        })?;
        Self::from_config(Config::new(uri))
    }

    /// A plain-HTTP API server, with a bearer token as kcache's identity (the simulated
    /// cluster with its RBAC table on).
    pub fn from_url_with_token(url: &str, token: &str) -> Result<Upstream, UpstreamError> {
        let uri = url.parse().map_err(|source| UpstreamError::Url {
            url: url.to_string(),
            source,
        })?;
        let mut config = Config::new(uri);
        config.auth_info.token = Some(token.to_string().into());
        Self::from_config(config)
    }

    fn from_config(mut config: Config) -> Result<Upstream, UpstreamError> {
        // Watches are long-lived; the reflector bounds them with timeoutSeconds itself.
        config.read_timeout = None;
        // No retries inside the client: a pass-through must hand the caller the upstream's
        // 429/503/504 (with its Retry-After) as it came, not hold the request while retrying
        // up to 15 times; kcache's own requests have their own bounds and backoff.
        config.default_retry = false;
        let url = config.cluster_url.to_string();
        let mut bare = config.clone();
        bare.auth_info = Default::default();
        let client = Clients::new(&config)?;
        let bare = Clients::new(&bare)?;
        Ok(Upstream {
            client,
            bare,
            url,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            cost: None,
            version: UpstreamVersion::default(),
        })
    }

    /// The same upstream, counting its requests and bytes in `metrics` (the running kcache's).
    pub fn with_metrics(mut self, metrics: &Metrics) -> Upstream {
        self.cost = Some(std::sync::Arc::new(cost::Counters::new(metrics)));
        self
    }

    /// The same upstream with another bound on kcache's own requests.
    pub(crate) fn with_request_timeout(mut self, timeout: std::time::Duration) -> Upstream {
        self.request_timeout = timeout;
        self
    }

    /// What of the upstream's behaviour depends on its version (see [`UpstreamVersion`]).
    pub(crate) fn version(&self) -> &UpstreamVersion {
        &self.version
    }

    /// Read the upstream's `/version` into [`Upstream::version`]; the minor version, or the
    /// error when it could not be had (then the newest recorded behaviour is assumed).
    pub(crate) async fn learn_version(&self) -> Result<u32, UpstreamError> {
        let body = self.get("/version", Purpose::Setup).await?;
        self.version
            .learn_version(&body)
            .ok_or_else(|| UpstreamError::Malformed("/version: no minor version".into()))
    }

    /// The bound on kcache's own requests (see [`Upstream::with_request_timeout`]).
    pub(crate) fn request_timeout(&self) -> std::time::Duration {
        self.request_timeout
    }

    /// Send a request as is as kcache, counted under `purpose`; the response body streams.
    pub(crate) async fn send(
        &self,
        req: Request<Body>,
        purpose: Purpose,
    ) -> Result<Response<CountedBody>, UpstreamError> {
        self.send_with(&self.client, req, purpose).await
    }

    /// Send a request with only the credentials it carries itself (a caller's own bearer
    /// token, or none for an anonymous caller).
    pub(crate) async fn send_bare(
        &self,
        req: Request<Body>,
        purpose: Purpose,
    ) -> Result<Response<CountedBody>, UpstreamError> {
        self.send_with(&self.bare, req, purpose).await
    }

    async fn send_with(
        &self,
        clients: &Clients,
        req: Request<Body>,
        purpose: Purpose,
    ) -> Result<Response<CountedBody>, UpstreamError> {
        use tower::ServiceExt as _;
        let sent = http_body::Body::size_hint(req.body()).exact().unwrap_or(0);
        let received = self.cost.as_ref().map(|c| c.count_request(purpose, sent));
        let resp = clients
            .for_request(&req, purpose)
            .oneshot(req)
            .await
            .map_err(transport_error)?;
        Ok(resp.map(|body| CountedBody::new(body, received)))
    }

    /// POST a JSON body as kcache and read the whole answer within the request timeout;
    /// non-2xx answers are errors (TokenReview and SubjectAccessReview).
    pub(crate) async fn post_json(
        &self,
        path: &str,
        body: Vec<u8>,
        purpose: Purpose,
    ) -> Result<Bytes, UpstreamError> {
        let req = Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(Body::from(body))
            .map_err(UpstreamError::Request)?;
        self.fetch(req, purpose).await
    }

    /// GET a path and read the whole body within the request timeout; non-2xx answers are
    /// errors with the Status message.
    pub(crate) async fn get(
        &self,
        path_and_query: &str,
        purpose: Purpose,
    ) -> Result<Bytes, UpstreamError> {
        self.get_accepting(path_and_query, "application/json", purpose)
            .await
    }

    /// `Upstream::get` asking for another media type (the protobuf mirror's lists).
    pub async fn get_accepting(
        &self,
        path_and_query: &str,
        accept: &str,
        purpose: Purpose,
    ) -> Result<Bytes, UpstreamError> {
        self.fetch(get_request(path_and_query, accept)?, purpose)
            .await
    }

    /// Send one request as kcache and read its whole answer within the request timeout;
    /// non-2xx answers are errors with the Status message.
    async fn fetch(&self, req: Request<Body>, purpose: Purpose) -> Result<Bytes, UpstreamError> {
        Ok(self.fetch_with_head(req, purpose).await?.1)
    }

    /// [`Upstream::fetch`], with the answer's head (for its `Content-Type`, when the answer
    /// may come in more than one media type).
    async fn fetch_with_head(
        &self,
        req: Request<Body>,
        purpose: Purpose,
    ) -> Result<(http::response::Parts, Bytes), UpstreamError> {
        let exchange = async {
            let resp = self.send(req, purpose).await?;
            let (head, body) = resp.into_parts();
            let body = body
                .collect()
                .await
                .map_err(UpstreamError::Body)?
                .to_bytes();
            if head.status.is_success() {
                Ok((head, body))
            } else {
                Err(status_error(head.status, &body))
            }
        };
        tokio::time::timeout(self.request_timeout, exchange)
            .await
            .unwrap_or(Err(UpstreamError::Timeout(self.request_timeout)))
    }

    /// The upstream's Table column definitions for a collection, verbatim (one one-item Table
    /// list). kcache computes the cells itself but takes the columns, whose descriptions are
    /// the upstream's API documentation, from the upstream it fronts.
    pub(crate) async fn table_columns(&self, collection: &str) -> Result<Bytes, UpstreamError> {
        const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
        let body = self
            .fetch(
                get_request(&format!("{collection}?limit=1"), TABLE)?,
                Purpose::Setup,
            )
            .await?;
        #[derive(Deserialize)]
        struct Table<'a> {
            #[serde(borrow, rename = "columnDefinitions")]
            columns: &'a serde_json::value::RawValue,
        }
        let t: Table<'_> = serde_json::from_slice(&body)
            .map_err(UpstreamError::decode(format!("Table of {collection}")))?;
        Ok(Bytes::copy_from_slice(t.columns.get().as_bytes()))
    }

    /// The `additionalPrinterColumns` of a custom resource's version (an empty array when the
    /// CRD declares none).
    pub(crate) async fn crd_printer_columns(
        &self,
        group: &str,
        resource: &str,
        version: &str,
    ) -> Result<serde_json::Value, UpstreamError> {
        let v = self.crd_version(group, resource, version).await?;
        Ok(Some(&v["additionalPrinterColumns"])
            .filter(|c| !c.is_null())
            .cloned()
            .unwrap_or_else(|| serde_json::json!([])))
    }

    /// The `selectableFields` jsonPaths of a custom resource's version (`.spec.color`; none
    /// when the CRD declares none, as before Kubernetes 1.30).
    pub(crate) async fn crd_selectable_fields(
        &self,
        group: &str,
        resource: &str,
        version: &str,
    ) -> Result<Vec<String>, UpstreamError> {
        let v = self.crd_version(group, resource, version).await?;
        Ok(selectable_fields_of(&v))
    }

    /// One version entry of a custom resource's CRD (null when the CRD does not list it).
    pub(crate) async fn crd_version(
        &self,
        group: &str,
        resource: &str,
        version: &str,
    ) -> Result<serde_json::Value, UpstreamError> {
        let body = self
            .get(
                &format!(
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{resource}.{group}"
                ),
                Purpose::Setup,
            )
            .await?;
        let mut crd: serde_json::Value = serde_json::from_slice(&body)
            .map_err(UpstreamError::decode(format!("CRD {resource}.{group}")))?;
        Ok(crd["spec"]["versions"]
            .as_array_mut()
            .and_then(|vs| vs.iter_mut().find(|v| v["name"] == version))
            .map(serde_json::Value::take)
            .unwrap_or_default())
    }

    /// GET a path and return the response once its status is 2xx (the body still streams);
    /// the response head must come within the request timeout.
    pub(crate) async fn open(
        &self,
        path_and_query: &str,
        purpose: Purpose,
    ) -> Result<Response<CountedBody>, UpstreamError> {
        self.open_accepting(path_and_query, "application/json", purpose)
            .await
    }

    /// [`Upstream::open`] asking for another media type (the protobuf mirror's watch).
    pub(crate) async fn open_accepting(
        &self,
        path_and_query: &str,
        accept: &str,
        purpose: Purpose,
    ) -> Result<Response<CountedBody>, UpstreamError> {
        let req = get_request(path_and_query, accept)?;
        let resp = tokio::time::timeout(self.request_timeout, self.send(req, purpose))
            .await
            .map_err(|_| UpstreamError::Timeout(self.request_timeout))??;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let code = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        Err(status_error(code, &body))
    }

    /// Resolve a configured resource through discovery, then read one item to learn the
    /// upstream's list form (typed built-in lists start with `kind`, CR lists with `apiVersion`).
    pub(crate) async fn discover(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Result<ResourceInfo, UpstreamError> {
        let gv_path = crate::resource::api_path(group, version);
        let name = crate::resource::TypeName::new(group, version, resource).to_string();
        let list: ApiResourceList = match self.get(&gv_path, Purpose::Setup).await {
            Ok(body) => serde_json::from_slice(&body).map_err(UpstreamError::decode(&gv_path))?,
            Err(UpstreamError::Status { code: 404, .. }) => {
                return Err(UpstreamError::UnknownResource(name))
            }
            Err(e) => return Err(e),
        };
        let entry = list
            .resources
            .into_iter()
            .find(|r| r.name == resource)
            .ok_or_else(|| UpstreamError::UnknownResource(name.clone()))?;
        // Entries without verbs (an aggregated API's old discovery) are taken to allow both.
        if let Some(verbs) = &entry.verbs {
            if !(verbs.iter().any(|v| v == "list") && verbs.iter().any(|v| v == "watch")) {
                return Err(UpstreamError::NotListable(name));
            }
        }
        let mut info = ResourceInfo {
            group: group.to_string(),
            version: version.to_string(),
            resource: resource.to_string(),
            kind: entry.kind,
            namespaced: entry.namespaced,
            custom: ResourceInfo::guess_custom(group),
        };
        let probe = self
            .get(&format!("{gv_path}/{resource}?limit=1"), Purpose::Setup)
            .await?;
        info.custom = !probe.starts_with(b"{\"kind\"");
        Ok(info)
    }
}

/// The `selectableFields` jsonPaths of a CRD's version entry (see [`Upstream::crd_version`]).
pub(crate) fn selectable_fields_of(version: &serde_json::Value) -> Vec<String> {
    version["selectableFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["jsonPath"].as_str().map(String::from))
        .collect()
}

fn get_request(path_and_query: &str, accept: &str) -> Result<Request<Body>, UpstreamError> {
    Request::get(path_and_query)
        .header(http::header::ACCEPT, accept)
        .body(Body::empty())
        .map_err(UpstreamError::Request)
}

/// Turn a non-2xx answer into an error carrying the Status message when there is one.
pub(crate) fn status_error(code: StatusCode, body: &[u8]) -> UpstreamError {
    #[derive(Deserialize)]
    struct Status {
        #[serde(default)]
        message: String,
    }
    let message = serde_json::from_slice::<Status>(body)
        .map(|s| s.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(body).trim().to_string());
    UpstreamError::Status {
        code: code.as_u16(),
        message,
    }
}

#[derive(Deserialize)]
struct ApiResourceList {
    resources: Vec<ApiResource>,
}

#[derive(Deserialize)]
struct ApiResource {
    name: String,
    kind: String,
    namespaced: bool,
    #[serde(default)]
    verbs: Option<Vec<String>>,
}

#[derive(Deserialize)]
pub(crate) struct ListMeta {
    #[serde(rename = "resourceVersion", default)]
    pub resource_version: String,
    #[serde(rename = "continue", default)]
    pub continue_token: Option<String>,
}
