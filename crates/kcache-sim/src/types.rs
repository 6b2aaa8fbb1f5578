//! Resource types served by the sim: the built-in table and per-type facts
//! (field selectors, status subresource, key order) that the apiserver hard-codes.

/// One served resource (a group/version/resource triple plus what discovery says about it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceType {
    /// API group, `""` for the core group.
    pub group: String,
    /// Served version, e.g. `v1`.
    pub version: String,
    /// Plural resource name, e.g. `configmaps`.
    pub resource: String,
    /// Singular name, e.g. `configmap`.
    pub singular: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names for kubectl, e.g. `cm`.
    pub short_names: Vec<String>,
    /// Served by a CRD: JSON keys sorted recursively, the custom-resource list form,
    /// the object returned on DELETE, text/plain 404s under its group.
    pub custom: bool,
    /// Field-selector names selectable beyond what kube-apiserver v1.28 has for the type, to
    /// model a newer apiserver: `spec.type`/`spec.clusterIP` of a Service (1.30+), or a CRD's
    /// `selectableFields` (GA in 1.32), named by their jsonPath without the leading `.`. A
    /// custom type with any is served with a CRD object listing them (see `Sim::register`).
    pub selectable_fields: Vec<String>,
}

impl ResourceType {
    /// `apiextensions.k8s.io/v1` CustomResourceDefinitions, the type a custom resource's
    /// definition object is stored as (served on demand: not every sim holds CRDs).
    pub fn custom_resource_definitions() -> Self {
        ResourceType {
            group: "apiextensions.k8s.io".into(),
            version: "v1".into(),
            resource: "customresourcedefinitions".into(),
            singular: "customresourcedefinition".into(),
            kind: "CustomResourceDefinition".into(),
            namespaced: false,
            short_names: vec!["crd".into()],
            ..ResourceType::default()
        }
    }

    /// A namespaced or cluster-scoped custom resource (CRD-served) type.
    pub fn custom(
        group: &str,
        version: &str,
        resource: &str,
        singular: &str,
        kind: &str,
        namespaced: bool,
        short_names: &[&str],
    ) -> Self {
        ResourceType {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
            singular: singular.into(),
            kind: kind.into(),
            namespaced,
            short_names: short_names.iter().map(|s| s.to_string()).collect(),
            custom: true,
            selectable_fields: Vec::new(),
        }
    }

    /// The same type with these extra selectable fields (see
    /// [`ResourceType::selectable_fields`]).
    pub fn with_selectable_fields(mut self, fields: &[&str]) -> Self {
        self.selectable_fields = fields.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `resource` or `resource.group`, as the apiserver names a type in messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// Whether the type has a `status` subresource (all CRDs here are assumed to have one).
    pub fn has_status(&self) -> bool {
        self.custom
            || matches!(
                self.resource.as_str(),
                "namespaces"
                    | "nodes"
                    | "pods"
                    | "services"
                    | "deployments"
                    | "replicasets"
                    | "statefulsets"
                    | "daemonsets"
                    | "jobs"
            )
    }

    /// Whether the apiserver sets and bumps `metadata.generation` for this type.
    pub fn has_generation(&self) -> bool {
        self.custom
            || matches!(
                self.resource.as_str(),
                "deployments" | "replicasets" | "statefulsets" | "daemonsets" | "jobs"
            )
    }

    /// Discovery categories (built-ins only: the type struct has no field for CRDs).
    pub fn categories(&self) -> &'static [&'static str] {
        if self.custom {
            return &[];
        }
        match self.resource.as_str() {
            "pods" | "services" | "deployments" | "replicasets" | "statefulsets" | "daemonsets"
            | "jobs" => &["all"],
            _ => &[],
        }
    }

    /// Discovery verbs, in the order the apiserver lists them.
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.custom {
            &[
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "create",
                "update",
                "watch",
            ]
        } else if self.resource == "namespaces" {
            &[
                "create", "delete", "get", "list", "patch", "update", "watch",
            ]
        } else {
            &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ]
        }
    }

    /// Go struct order of the type's top-level fields after kind/apiVersion/metadata; keys not
    /// listed follow in the order they were given.
    pub fn field_order(&self) -> &'static [&'static str] {
        if self.custom {
            return &[];
        }
        match self.kind.as_str() {
            "ConfigMap" => &["immutable", "data", "binaryData"],
            "Secret" => &["immutable", "data", "stringData", "type"],
            "Endpoints" => &["subsets"],
            "ServiceAccount" => &[
                "secrets",
                "imagePullSecrets",
                "automountServiceAccountToken",
            ],
            "EndpointSlice" => &["addressType", "endpoints", "ports"],
            "Event" => &[
                "involvedObject",
                "reason",
                "message",
                "source",
                "firstTimestamp",
                "lastTimestamp",
                "count",
                "type",
                "eventTime",
                "series",
                "action",
                "related",
                "reportingComponent",
                "reportingInstance",
            ],
            _ => &["spec", "status"],
        }
    }

    /// Field selector support: `Ok(path)` = the JSON path (and default) to compare, or the
    /// apiserver's 400 message for an unsupported label.
    pub fn field_path(&self, label: &str) -> Result<FieldPath, String> {
        let plain = |p: &str| {
            Ok(FieldPath {
                path: p.into(),
                default: "",
            })
        };
        match label {
            "metadata.name" => return plain("metadata.name"),
            "metadata.namespace" if self.namespaced || !self.has_field_conversion() => {
                return plain("metadata.namespace")
            }
            _ => {}
        }
        let found = match (self.group.as_str(), self.kind.as_str(), label) {
            ("", "Pod", "spec.hostNetwork") => Some(FieldPath {
                path: "spec.hostNetwork".into(),
                default: "false",
            }),
            ("", "Pod", "spec.host") => Some(FieldPath {
                path: "spec.nodeName".into(),
                default: "",
            }),
            ("", "Pod", "status.podIPs") => Some(FieldPath {
                path: "status.podIP".into(),
                default: "",
            }),
            (
                "",
                "Pod",
                l @ ("spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"),
            ) => Some(FieldPath {
                path: l.to_string(),
                default: "",
            }),
            ("", "Node", "spec.unschedulable") => Some(FieldPath {
                path: "spec.unschedulable".into(),
                default: "false",
            }),
            ("", "Namespace", "status.phase") => Some(FieldPath {
                path: "status.phase".into(),
                default: "",
            }),
            ("", "Secret", "type") => Some(FieldPath {
                path: "type".into(),
                default: "",
            }),
            (
                "",
                "Event",
                l @ ("involvedObject.kind"
                | "involvedObject.namespace"
                | "involvedObject.name"
                | "involvedObject.uid"
                | "involvedObject.apiVersion"
                | "involvedObject.resourceVersion"
                | "involvedObject.fieldPath"
                | "reason"
                | "reportingComponent"
                | "type"),
            ) => Some(FieldPath {
                path: l.to_string(),
                default: "",
            }),
            ("", "Event", "source") => Some(FieldPath {
                path: "source.component".into(),
                default: "",
            }),
            ("batch", "Job", "status.successful") => Some(FieldPath {
                path: "status.succeeded".into(),
                default: "0",
            }),
            // A newer apiserver's extra fields: the value at the path, "" when absent (as the
            // CRD `selectableFields` documentation says, and Service's two are strings).
            (_, _, l) if self.selectable_fields.iter().any(|f| f == l) => Some(FieldPath {
                path: l.to_string(),
                default: "",
            }),
            _ => None,
        };
        match found {
            Some(f) => Ok(f),
            None if self.has_field_conversion() => Err(format!("field label not supported: {label}")),
            None => Err(format!(
                "\"{label}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            )),
        }
    }

    /// Types with their own field-label conversion answer "field label not supported: X";
    /// the rest use the default conversion and its "is not a known field selector" message.
    /// Service has none in v1.28 (it gained one with its two fields in a later version, which
    /// extra selectable fields model).
    fn has_field_conversion(&self) -> bool {
        self.custom
            || !self.selectable_fields.is_empty()
            || (self.group.is_empty()
                && matches!(
                    self.kind.as_str(),
                    "Pod" | "Node" | "Namespace" | "Secret" | "Event"
                ))
            || (self.group == "batch" && self.kind == "Job")
    }
}

/// Where a supported field selector label reads its value.
#[derive(Clone, Debug)]
pub struct FieldPath {
    /// Dotted JSON path in the object.
    pub path: String,
    /// Value when the field is absent (e.g. `spec.hostNetwork` defaults to `false`).
    pub default: &'static str,
}

impl ResourceType {
    /// Whether a DELETE of one object answers with the object (at its deletion's
    /// resourceVersion) rather than a Status: custom resources, and the built-ins whose
    /// apiserver storage sets `ReturnDeletedObject` (of the sim's: Pods, Services,
    /// ServiceAccounts and Namespaces). A client that deletes a Pod learns the
    /// resourceVersion of its DELETED event from the answer.
    pub(crate) fn returns_deleted_object(&self) -> bool {
        self.custom
            || (self.group.is_empty()
                && matches!(
                    self.resource.as_str(),
                    "pods" | "services" | "serviceaccounts" | "namespaces"
                ))
    }
}

/// A built-in type served as `v1` of its group.
pub(crate) fn builtin(
    group: &str,
    resource: &str,
    singular: &str,
    kind: &str,
    namespaced: bool,
    short: &[&str],
) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        singular: singular.into(),
        kind: kind.into(),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        custom: false,
        selectable_fields: Vec::new(),
    }
}

/// The built-in types every sim serves from the start.
pub fn builtins() -> Vec<ResourceType> {
    vec![
        builtin("", "namespaces", "namespace", "Namespace", false, &["ns"]),
        builtin("", "nodes", "node", "Node", false, &["no"]),
        builtin("", "pods", "pod", "Pod", true, &["po"]),
        builtin("", "configmaps", "configmap", "ConfigMap", true, &["cm"]),
        builtin("", "secrets", "secret", "Secret", true, &[]),
        builtin("", "services", "service", "Service", true, &["svc"]),
        builtin("", "endpoints", "endpoints", "Endpoints", true, &["ep"]),
        builtin("", "events", "event", "Event", true, &["ev"]),
        builtin(
            "",
            "serviceaccounts",
            "serviceaccount",
            "ServiceAccount",
            true,
            &["sa"],
        ),
        builtin(
            "apps",
            "deployments",
            "deployment",
            "Deployment",
            true,
            &["deploy"],
        ),
        builtin(
            "apps",
            "replicasets",
            "replicaset",
            "ReplicaSet",
            true,
            &["rs"],
        ),
        builtin(
            "apps",
            "statefulsets",
            "statefulset",
            "StatefulSet",
            true,
            &["sts"],
        ),
        builtin(
            "apps",
            "daemonsets",
            "daemonset",
            "DaemonSet",
            true,
            &["ds"],
        ),
        builtin("batch", "jobs", "job", "Job", true, &[]),
        builtin(
            "discovery.k8s.io",
            "endpointslices",
            "endpointslice",
            "EndpointSlice",
            true,
            &[],
        ),
    ]
}
