//! Per-resource field support in kube-apiserver v1.28: which fields each resource type's
//! field-label conversion accepts, the client aliases it renames, and the exact 400 message for
//! any other field.
//!
//! Separate because it is version-specific knowledge of the apiserver's registered conversions
//! (it decides what kcache answers itself and what it forwards), independent of how selectors
//! are parsed or matched.

use super::field::{FieldRequirement, FieldSelector};
use super::go_format::go_quote;
use super::SelectorError;

/// The error text a resource type's field-label conversion produces for an unsupported field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsupportedField {
    /// The apiserver's default conversion (types without their own):
    /// `"X" is not a known field selector: only "metadata.name", "metadata.namespace"`.
    NotKnown,
    /// Most registered conversions and custom resources: `field label not supported: X`.
    NotSupported,
    /// batch/v1 Job's conversion: `field label "X" not supported for batchv1.Job`.
    BatchV1Job,
}

impl UnsupportedField {
    /// The 400 message for `field`.
    pub fn message(self, field: &str) -> String {
        match self {
            UnsupportedField::NotKnown => format!(
                "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                go_quote(field)
            ),
            UnsupportedField::NotSupported => format!("field label not supported: {field}"),
            UnsupportedField::BatchV1Job => {
                format!(
                    "field label {} not supported for batchv1.Job",
                    go_quote(field)
                )
            }
        }
    }
}

/// How a resource type treats field selectors in kube-apiserver v1.28.
///
/// `metadata.name` is always selectable. `metadata.namespace` is accepted by the default
/// conversion for every type, even cluster-scoped ones (whose objects then have no namespace,
/// i.e. `""`); the registered conversions of Node, Namespace and CertificateSigningRequest do
/// not list it, and the CRD converter accepts it only for namespaced custom resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    /// Selectable fields besides `metadata.name`/`metadata.namespace`, as clients spell them.
    pub extra: &'static [&'static str],
    /// True when the type has its own conversion (a registered built-in one or the CRD
    /// converter) rather than the apiserver's default.
    pub custom_conversion: bool,
    /// Whether `metadata.namespace` is accepted (for custom resources: when namespaced).
    pub metadata_namespace: bool,
    /// The message for any other field.
    pub unsupported: UnsupportedField,
    /// Client spellings the conversion renames: (accepted name, name in the object's field set).
    pub aliases: &'static [(&'static str, &'static str)],
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    // Accepted by the conversion but absent from the pod field set, so it always reads "".
    "status.podIPs",
    "status.nominatedNodeName",
    // Old v1 clients' name for spec.nodeName.
    "spec.host",
];
const POD_ALIASES: &[(&str, &str)] = &[("spec.host", "spec.nodeName")];

const CORE_EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

const EVENTS_V1_FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "source",
    "type",
];
const EVENTS_V1_ALIASES: &[(&str, &str)] = &[
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
];

/// Field-selector support of a resource by API group (`""` = core) and plural resource name.
///
/// Built-ins with a registered conversion in v1.28: pods, nodes, namespaces, secrets, events,
/// replicationcontrollers (core), jobs (batch), certificatesigningrequests and
/// clustertrustbundles (certificates.k8s.io), events (events.k8s.io). Services gained theirs
/// only in v1.30, and apps/v1 (replicasets included) registers none, so they get the default.
/// Custom resources (`custom == true`) get the CRD converter's rules.
pub fn field_spec(group: &str, resource: &str, custom: bool) -> FieldSpec {
    let spec = |extra, metadata_namespace, unsupported, aliases| FieldSpec {
        extra,
        custom_conversion: true,
        metadata_namespace,
        unsupported,
        aliases,
    };
    use UnsupportedField::*;
    if custom {
        return spec(&[], true, NotSupported, &[]);
    }
    match (group, resource) {
        ("", "pods") => spec(POD_FIELDS, true, NotSupported, POD_ALIASES),
        ("", "nodes") => spec(&["spec.unschedulable"], false, NotSupported, &[]),
        ("", "namespaces") => spec(&["status.phase"], false, NotSupported, &[]),
        ("", "secrets") => spec(&["type"], true, NotSupported, &[]),
        ("", "replicationcontrollers") => spec(&["status.replicas"], true, NotSupported, &[]),
        ("", "events") => spec(CORE_EVENT_FIELDS, true, NotSupported, &[]),
        ("events.k8s.io", "events") => {
            spec(EVENTS_V1_FIELDS, true, NotSupported, EVENTS_V1_ALIASES)
        }
        ("batch", "jobs") => spec(&["status.successful"], true, BatchV1Job, &[]),
        ("certificates.k8s.io", "certificatesigningrequests" | "clustertrustbundles") => {
            spec(&["spec.signerName"], false, NotSupported, &[])
        }
        _ => FieldSpec {
            extra: &[],
            custom_conversion: false,
            metadata_namespace: true,
            unsupported: NotKnown,
            aliases: &[],
        },
    }
}

/// Checks every requirement's field against the resource and returns the selector as the
/// apiserver matches it (client aliases such as `spec.host` renamed to their field-set names).
/// The first unsupported field, in the apiserver's term order, gives the error.
pub fn convert_fields(
    sel: &FieldSelector,
    group: &str,
    resource: &str,
    namespaced: bool,
    custom: bool,
) -> Result<FieldSelector, SelectorError> {
    let spec = field_spec(group, resource, custom);
    let mut requirements = Vec::with_capacity(sel.requirements.len());
    for r in &sel.requirements {
        if !known_field(&r.field, group, resource, namespaced, custom) {
            return Err(SelectorError::new(spec.unsupported.message(&r.field)));
        }
        let field = spec
            .aliases
            .iter()
            .find(|(from, _)| *from == r.field)
            .map_or(r.field.as_str(), |(_, to)| to);
        requirements.push(FieldRequirement {
            field: field.to_string(),
            op: r.op,
            value: r.value.clone(),
        });
    }
    Ok(FieldSelector { requirements })
}

/// Whether kcache knows `field` as selectable for the resource (v1.28's field-label
/// conversions, see [`field_spec`]). Newer apiservers select on more fields, so an unknown
/// field is not necessarily an error upstream.
pub fn known_field(
    field: &str,
    group: &str,
    resource: &str,
    namespaced: bool,
    custom: bool,
) -> bool {
    let spec = field_spec(group, resource, custom);
    field == "metadata.name"
        || (field == "metadata.namespace" && spec.metadata_namespace && (namespaced || !custom))
        || spec.extra.contains(&field)
}

/// Validates every requirement's field against the resource; the error has the apiserver's
/// exact message. `namespaced` matters only for custom resources: built-in types accept or
/// reject `metadata.namespace` by their conversion alone (see [`FieldSpec`]).
pub fn validate_fields(
    sel: &FieldSelector,
    group: &str,
    resource: &str,
    namespaced: bool,
    custom: bool,
) -> Result<(), SelectorError> {
    convert_fields(sel, group, resource, namespaced, custom).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::fields_err;

    #[test]
    fn fixture_err_list_cm_unsupported_field_selector() {
        assert_eq!(
            fields_err("data.index=1", "", "configmaps", true, false),
            r#""data.index" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
    }

    #[test]
    fn fixture_err_list_pods_unsupported_field_selector() {
        assert_eq!(
            fields_err("spec.containers.image=nginx", "", "pods", true, false),
            "field label not supported: spec.containers.image"
        );
    }

    #[test]
    fn fixture_err_list_widgets_field_selector_spec() {
        assert_eq!(
            fields_err(
                "spec.color=red",
                "fixtures.example.com",
                "widgets",
                true,
                true
            ),
            "field label not supported: spec.color"
        );
    }

    #[test]
    fn field_support_per_resource() {
        let ok = |s: &str, g: &str, r: &str, ns: bool, custom: bool| {
            let sel = FieldSelector::parse(s).unwrap();
            validate_fields(&sel, g, r, ns, custom).is_ok()
        };
        assert!(ok(
            "metadata.name=a,metadata.namespace=b",
            "",
            "configmaps",
            true,
            false
        ));
        assert!(ok("spec.nodeName=,status.phase=Pending,spec.schedulerName=x,spec.hostNetwork=true,status.podIP=1,status.podIPs=1,status.nominatedNodeName=n,spec.restartPolicy=Always,spec.serviceAccountName=d,spec.host=n", "", "pods", true, false));
        // The default conversion accepts metadata.namespace even for cluster-scoped types...
        assert!(ok(
            "metadata.namespace=x",
            "rbac.authorization.k8s.io",
            "clusterroles",
            false,
            false
        ));
        // ...but Node, Namespace and CSR conversions do not list it.
        assert_eq!(
            fields_err("metadata.namespace=x", "", "nodes", false, false),
            "field label not supported: metadata.namespace"
        );
        assert_eq!(
            fields_err("metadata.namespace=x", "", "namespaces", false, false),
            "field label not supported: metadata.namespace"
        );
        assert!(ok("status.phase=Active", "", "namespaces", false, false));
        assert!(ok("spec.unschedulable=false", "", "nodes", false, false));
        assert!(ok(
            "spec.signerName=x",
            "certificates.k8s.io",
            "certificatesigningrequests",
            false,
            false
        ));
        assert!(ok("type=Opaque", "", "secrets", true, false));
        assert!(ok(
            "status.replicas=0",
            "",
            "replicationcontrollers",
            true,
            false
        ));
        assert!(ok(
            "involvedObject.name=x,source=kubelet,reportingComponent=k",
            "",
            "events",
            true,
            false
        ));
        assert!(ok(
            "regarding.name=x,reportingController=k,source=s",
            "events.k8s.io",
            "events",
            true,
            false
        ));
        assert_eq!(
            fields_err(
                "involvedObject.name=x",
                "events.k8s.io",
                "events",
                true,
                false
            ),
            "field label not supported: involvedObject.name"
        );
        // Custom resources: namespace only when namespaced.
        assert!(ok("metadata.namespace=a", "x.io", "widgets", true, true));
        assert_eq!(
            fields_err("metadata.namespace=a", "x.io", "gadgets", false, true),
            "field label not supported: metadata.namespace"
        );
        // Jobs have their own wording.
        assert!(ok("status.successful=1", "batch", "jobs", true, false));
        assert_eq!(
            fields_err("status.succeeded=1", "batch", "jobs", true, false),
            r#"field label "status.succeeded" not supported for batchv1.Job"#
        );
        // Services and ReplicaSets have no conversion in v1.28.
        assert_eq!(
            fields_err("spec.type=ClusterIP", "", "services", true, false),
            r#""spec.type" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        assert_eq!(
            fields_err("status.replicas=1", "apps", "replicasets", true, false),
            r#""status.replicas" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        // The default conversion quotes the field like Go's %q.
        assert_eq!(
            fields_err("a\"b=1", "", "configmaps", true, false),
            r#""a\"b" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        assert_eq!(
            fields_err("=x", "", "configmaps", true, false),
            r#""" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        // The first failing term in sorted order is reported.
        assert_eq!(
            fields_err("zeta=1,alpha=2", "", "configmaps", true, false),
            r#""alpha" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        assert_eq!(
            fields_err("a=1,a.b=1", "", "configmaps", true, false),
            r#""a.b" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        assert!(!field_spec("", "configmaps", false).custom_conversion);
        assert!(field_spec("", "pods", false).custom_conversion);
        assert!(field_spec("x.io", "widgets", true).custom_conversion);
    }

    #[test]
    fn known_fields_are_v128s() {
        let k = |f: &str, g: &str, r: &str, namespaced: bool, custom: bool| {
            known_field(f, g, r, namespaced, custom)
        };
        assert!(k("spec.nodeName", "", "pods", true, false));
        assert!(k("spec.host", "", "pods", true, false));
        assert!(k("metadata.namespace", "", "configmaps", true, false));
        // Service selects on spec.type only from v1.30: not kcache's to answer.
        assert!(!k("spec.type", "", "services", true, false));
        assert!(!k("metadata.namespace", "", "nodes", false, false));
        assert!(k(
            "metadata.namespace",
            "example.com",
            "widgets",
            true,
            true
        ));
        assert!(!k(
            "metadata.namespace",
            "example.com",
            "clusterwidgets",
            false,
            true
        ));
        assert!(!k("spec.color", "example.com", "widgets", true, true));
        assert!(!k("", "", "configmaps", true, false));
    }

    #[test]
    fn convert_fields_renames_aliases() {
        let sel = FieldSelector::parse("spec.host=n1").unwrap();
        let conv = convert_fields(&sel, "", "pods", true, false).unwrap();
        assert_eq!(conv.to_string(), "spec.nodeName=n1");
        let sel = FieldSelector::parse("regarding.kind=Pod,reportingController=k").unwrap();
        let conv = convert_fields(&sel, "events.k8s.io", "events", true, false).unwrap();
        assert_eq!(
            conv.to_string(),
            "involvedObject.kind=Pod,reportingComponent=k"
        );
    }
}
