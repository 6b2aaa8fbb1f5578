//! What the bench writes into the cluster, and deletes at the end: the fleet's objects made
//! its own, the node clients' identities.

use std::time::Instant;

use futures::stream::StreamExt;
use kcache_sim::seed::{self, FleetSpec};
use serde_json::{json, Value};

use super::super::progress;
use super::{CallError, Clients, Fleet, Seeded, CREATED_BY, PARALLEL};

/// A bench object, as the bench writes it: its collection's path and its body.
struct Object {
    collection: String,
    body: Value,
}

impl Fleet<'_> {
    fn labels(&self) -> Value {
        labels(&self.prefix)
    }

    /// Create the fleet: namespaces (with the `default` ServiceAccount that Pods are admitted
    /// with, which a cluster without its controllers does not make), Nodes, Services,
    /// EndpointSlices, Pods. Returns a Pod to create the churn's from, and the slices' names.
    pub(super) async fn seed(&self) -> Result<Seeded, String> {
        progress(format!("fleet: writing a cluster of {} nodes", self.nodes));
        let objects = seed::fleet(&FleetSpec {
            nodes: self.nodes,
            seed: 45,
        });
        let mut namespaces = vec![self.system()];
        let mut batches: [Vec<Object>; 4] = Default::default();
        let mut template = None;
        for o in &objects {
            let mut body = o.object.clone();
            own(&self.prefix, &mut body);
            let ns = body["metadata"]["namespace"].as_str().map(str::to_owned);
            let (batch, collection) = match (o.resource, &ns) {
                ("namespaces", _) => {
                    namespaces.push(body["metadata"]["name"].as_str().unwrap_or("").to_owned());
                    continue;
                }
                ("nodes", _) => {
                    body["spec"]["unschedulable"] = true.into();
                    body["spec"]["taints"] = json!([{
                        "key": "bench.kcache.dev/fleet",
                        "value": self.prefix,
                        "effect": "NoSchedule",
                    }]);
                    (0, "/api/v1/nodes".to_string())
                }
                ("services", Some(ns)) => {
                    if let Some(spec) = body["spec"].as_object_mut() {
                        // No selector: no EndpointSlice controller manages its slices, and
                        // an address of the cluster's own choosing.
                        for key in ["selector", "clusterIP", "clusterIPs"] {
                            spec.remove(key);
                        }
                    }
                    (1, format!("/api/v1/namespaces/{ns}/services"))
                }
                ("endpointslices", Some(ns)) => {
                    body["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] =
                        "kcache-bench".into();
                    (
                        2,
                        format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"),
                    )
                }
                ("pods", Some(ns)) if body["spec"]["nodeName"].is_string() => {
                    if let Some(spec) = body["spec"].as_object_mut() {
                        spec.remove("priority");
                        spec.insert("serviceAccountName".into(), "default".into());
                        spec.remove("serviceAccount");
                    }
                    template.get_or_insert_with(|| body.clone());
                    (3, format!("/api/v1/namespaces/{ns}/pods"))
                }
                _ => continue,
            };
            batches[batch].push(Object { collection, body });
        }
        let template = template.ok_or("the fleet has no scheduled Pod")?;
        for ns in &namespaces {
            self.create_namespace(ns).await?;
        }
        let slices = batches[2]
            .iter()
            .filter_map(|o| {
                let meta = &o.body["metadata"];
                Some((
                    meta["namespace"].as_str()?.to_owned(),
                    meta["name"].as_str()?.to_owned(),
                ))
            })
            .collect();
        for (what, batch) in ["Nodes", "Services", "EndpointSlices", "Pods"]
            .iter()
            .zip(batches)
        {
            let t = Instant::now();
            let n = self.create_all(batch).await?;
            progress(format!(
                "fleet: {n} {what} created in {:.1} s",
                t.elapsed().as_secs_f64()
            ));
        }
        Ok(Seeded {
            pod: template,
            slices,
        })
    }

    async fn create_namespace(&self, ns: &str) -> Result<(), String> {
        let body = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": self.labels()}});
        // A POST: a name taken already stops the bench rather than have it delete what is
        // not its own.
        self.call(http::Method::POST, "/api/v1/namespaces", Some(body))
            .await?;
        self.namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ns.to_owned());
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "labels": self.labels()}});
        match self
            .call_status(
                http::Method::POST,
                &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
                Some(sa),
            )
            .await
        {
            // A cluster's own controller made it first.
            Ok(_) | Err(CallError::Status { code: 409, .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Create every object, [`PARALLEL`] at a time.
    async fn create_all(&self, objects: Vec<Object>) -> Result<usize, String> {
        let mut done = futures::stream::iter(objects.into_iter().map(|o| async move {
            self.call(http::Method::POST, &o.collection, Some(o.body))
                .await
        }))
        .buffer_unordered(PARALLEL);
        let mut n = 0;
        while let Some(r) = done.next().await {
            r?;
            n += 1;
        }
        Ok(n)
    }

    /// A ServiceAccount per node for its kubelet and one for the kube-proxies, a token each
    /// (TokenRequest), allowed to read what they read.
    pub(super) async fn identities(&self) -> Result<Clients, String> {
        progress(format!(
            "fleet: {} identities (ServiceAccount tokens) for the node clients",
            2 * self.nodes
        ));
        let ns = self.system();
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": self.prefix, "labels": self.labels()},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "nodes", "services"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            ],
        });
        self.call(
            http::Method::POST,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            Some(role),
        )
        .await?;
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": self.prefix, "labels": self.labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": self.prefix},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": format!("system:serviceaccounts:{ns}")}],
        });
        self.call(
            http::Method::POST,
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            Some(binding),
        )
        .await?;
        let mut accounts: Vec<String> = (1..=self.nodes)
            .map(|i| format!("kubelet-node-{i}"))
            .collect();
        accounts.push("kube-proxy".into());
        let created = accounts.iter().map(|name| Object {
            collection: format!("/api/v1/namespaces/{ns}/serviceaccounts"),
            body: json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": name, "labels": self.labels()}}),
        });
        self.create_all(created.collect()).await?;
        let token_of = |account: String| {
            let path = format!("/api/v1/namespaces/{ns}/serviceaccounts/{account}/token");
            async move {
                let v = self
                    .call(
                        http::Method::POST,
                        &path,
                        Some(
                            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": {"expirationSeconds": 7200}}),
                        ),
                    )
                    .await?;
                let token = v["status"]["token"]
                    .as_str()
                    .ok_or("a TokenRequest without a token")?;
                http::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| e.to_string())
            }
        };
        let kubelets =
            futures::stream::iter((1..=self.nodes).map(|i| token_of(format!("kubelet-node-{i}"))))
                .buffered(PARALLEL)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<_>, String>>()?;
        let proxies =
            futures::stream::iter((1..=self.nodes).map(|_| token_of("kube-proxy".into())))
                .buffered(PARALLEL)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<_>, String>>()?;
        Ok(Clients {
            kubelets: kubelets.into(),
            proxies: proxies.into(),
        })
    }

    /// Delete everything the bench created: each namespace's Pods, EndpointSlices, Services
    /// and ServiceAccounts (a cluster without its controllers does not empty a deleted
    /// namespace), the namespaces, the Nodes, the ClusterRole and its binding.
    pub(super) async fn delete(&self) -> Result<String, String> {
        let namespaces = self
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let selector = format!("bench.kcache.dev%2Ffleet%3D{}", self.prefix);
        // Gone already is as good as deleted.
        let delete = |path: String| async move {
            match self.call_status(http::Method::DELETE, &path, None).await {
                Ok(_) | Err(CallError::Status { code: 404, .. }) => Ok(()),
                Err(e) => Err(String::from(e)),
            }
        };
        for ns in &namespaces {
            // The churn's Pods carry the label too: they are made from a seeded one.
            delete(format!(
                "/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0&labelSelector={selector}"
            ))
            .await?;
            delete(format!(
                "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector={selector}"
            ))
            .await?;
            // One by one: not every version deletes these as a collection.
            for resource in ["services", "serviceaccounts"] {
                let list = format!("/api/v1/namespaces/{ns}/{resource}");
                let names: Vec<String> =
                    match self.call_status(http::Method::GET, &list, None).await {
                        Ok(v) => v["items"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
                            .collect(),
                        Err(CallError::Status { code: 404, .. }) => Vec::new(),
                        Err(e) => return Err(e.into()),
                    };
                let results: Vec<Result<(), String>> = futures::stream::iter(
                    names.iter().map(|name| delete(format!("{list}/{name}"))),
                )
                .buffer_unordered(PARALLEL)
                .collect()
                .await;
                results.into_iter().collect::<Result<(), String>>()?;
            }
            delete(format!("/api/v1/namespaces/{ns}")).await?;
        }
        delete(format!("/api/v1/nodes?labelSelector={selector}")).await?;
        for kind in ["clusterrolebindings", "clusterroles"] {
            delete(format!(
                "/apis/rbac.authorization.k8s.io/v1/{kind}/{}",
                self.prefix
            ))
            .await?;
        }
        Ok(format!(
            "deleted: {} namespaces with their Pods, EndpointSlices, Services and ServiceAccounts, {} Nodes, a ClusterRole and its binding",
            namespaces.len(),
            self.nodes
        ))
    }
}

/// The labels of everything the bench creates under `prefix`.
fn labels(prefix: &str) -> Value {
    json!({CREATED_BY: "kcache-bench", "bench.kcache.dev/fleet": prefix})
}

/// A fleet object made the bench's own under `prefix`: its namespace and node names prefixed,
/// the fields the server sets and the references to objects the bench does not create
/// (owners, uids) dropped, and the bench's labels added.
fn own(prefix: &str, o: &mut Value) {
    let prefixed = |v: Option<&mut Value>| {
        if let Some(v) = v {
            if let Some(n) = v.as_str() {
                *v = format!("{prefix}-{n}").into();
            }
        }
    };
    let kind = o["kind"].as_str().unwrap_or("").to_owned();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
            "ownerReferences",
            "selfLink",
        ] {
            meta.remove(key);
        }
        match kind.as_str() {
            "Namespace" | "Node" => prefixed(meta.get_mut("name")),
            _ => prefixed(meta.get_mut("namespace")),
        }
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let (Some(have), Value::Object(add)) = (labels.as_object_mut(), self::labels(prefix)) {
            have.extend(add);
        }
    }
    if kind == "Pod" {
        prefixed(o.pointer_mut("/spec/nodeName"));
        if let Some(o) = o.as_object_mut() {
            o.remove("status");
        }
    }
    if let Some(endpoints) = o.get_mut("endpoints").and_then(Value::as_array_mut) {
        for e in endpoints {
            prefixed(e.get_mut("nodeName"));
            if let Some(r) = e.get_mut("targetRef").and_then(Value::as_object_mut) {
                prefixed(r.get_mut("namespace"));
                r.remove("uid");
                r.remove("resourceVersion");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_object_is_made_the_benchs_own() {
        let objects = seed::fleet(&FleetSpec { nodes: 2, seed: 1 });
        let find = |resource: &str| {
            let o = objects.iter().find(|o| o.resource == resource).unwrap();
            let mut body = o.object.clone();
            own("kf", &mut body);
            body
        };
        let node = find("nodes");
        assert!(node["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("kf-node-"));
        let pod = objects
            .iter()
            .find(|o| o.resource == "pods" && o.object["spec"]["nodeName"].is_string())
            .map(|o| {
                let mut body = o.object.clone();
                own("kf", &mut body);
                body
            })
            .unwrap();
        assert!(pod["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .starts_with("kf-"));
        assert!(pod["spec"]["nodeName"]
            .as_str()
            .unwrap()
            .starts_with("kf-node-"));
        for gone in ["uid", "resourceVersion", "managedFields", "ownerReferences"] {
            assert!(pod["metadata"].get(gone).is_none(), "{gone} kept");
        }
        assert!(pod.get("status").is_none());
        assert_eq!(pod["metadata"]["labels"]["bench.kcache.dev/fleet"], "kf");
        assert_eq!(pod["metadata"]["labels"][CREATED_BY], "kcache-bench");
        let slice = find("endpointslices");
        for e in slice["endpoints"].as_array().unwrap() {
            assert!(e["targetRef"]["namespace"]
                .as_str()
                .unwrap()
                .starts_with("kf-"));
            assert!(e["targetRef"].get("uid").is_none());
            if let Some(n) = e.get("nodeName") {
                assert!(n.as_str().unwrap().starts_with("kf-node-"));
            }
        }
        let ns = find("namespaces");
        assert!(ns["metadata"]["name"].as_str().unwrap().starts_with("kf-"));
        assert!(ns["metadata"].get("namespace").is_none());
    }
}
