//! Parsing an object for its row: only the fields its cells read.
//!
//! A row is printed from a `serde_json::Value` of the object, and building that `Value` was
//! most of a row's cost (a Pod's spec and status are most of its bytes, and its cells read a
//! handful of their fields). A [`Keep`] tree names the fields a kind's cells read; the parse
//! builds those and skips the rest without allocating.
//!
//! `metadata` is also returned as stored: the row's PartialObjectMetadata is those bytes. A
//! built-in type's stored bytes are the apiserver's own Go encoding of its typed object, and
//! `ObjectMeta` is written the same way inside a Pod as inside a PartialObjectMetadata, so
//! the copy is what the apiserver would write, without building and writing labels,
//! annotations and managedFields again. Of the metadata, a kind with a tree builds only what
//! its tree names; the others build it whole but for `managedFields`, which no cell reads.
//!
//! The trees are checked against the full parse (`tests.rs`: every recorded and seeded object
//! of each kind prints the same row either way).

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize as _;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Which fields of a JSON value to build.
#[derive(Debug)]
pub(super) enum Keep {
    /// The whole value.
    All,
    /// Of an object, these fields (each by its own tree); of a list, these fields of each
    /// element. Other values are built whole.
    Fields(&'static [(&'static str, Keep)]),
}

/// What a container's status contributes to a Pod's row (`cells::pod_summary`).
const CONTAINER_STATUS: Keep = Keep::Fields(&[
    ("name", Keep::All),
    ("restartCount", Keep::All),
    ("ready", Keep::All),
    ("started", Keep::All),
    (
        "state",
        Keep::Fields(&[
            ("waiting", Keep::Fields(&[("reason", Keep::All)])),
            ("running", Keep::Fields(&[])),
            (
                "terminated",
                Keep::Fields(&[
                    ("reason", Keep::All),
                    ("signal", Keep::All),
                    ("exitCode", Keep::All),
                ]),
            ),
        ]),
    ),
    (
        "lastState",
        Keep::Fields(&[("terminated", Keep::Fields(&[("finishedAt", Keep::All)]))]),
    ),
]);

/// The fields a Pod's row reads (`cells::pod`, `cells::pod_summary`): the containers only
/// counted, the init containers by name and restart policy.
const POD: Keep = Keep::Fields(&[
    (
        "metadata",
        Keep::Fields(&[
            ("name", Keep::All),
            ("creationTimestamp", Keep::All),
            ("deletionTimestamp", Keep::All),
        ]),
    ),
    (
        "spec",
        Keep::Fields(&[
            ("containers", Keep::Fields(&[])),
            (
                "initContainers",
                Keep::Fields(&[("name", Keep::All), ("restartPolicy", Keep::All)]),
            ),
            ("nodeName", Keep::All),
            ("readinessGates", Keep::All),
        ]),
    ),
    (
        "status",
        Keep::Fields(&[
            ("phase", Keep::All),
            ("reason", Keep::All),
            (
                "conditions",
                Keep::Fields(&[
                    ("type", Keep::All),
                    ("status", Keep::All),
                    ("reason", Keep::All),
                ]),
            ),
            ("initContainerStatuses", CONTAINER_STATUS),
            ("containerStatuses", CONTAINER_STATUS),
            ("podIP", Keep::All),
            ("podIPs", Keep::Fields(&[("ip", Keep::All)])),
            ("nominatedNodeName", Keep::All),
        ]),
    ),
]);

/// The fields a Node's row reads (`cells::node`): not its images, most of its bytes.
const NODE: Keep = Keep::Fields(&[
    (
        "metadata",
        Keep::Fields(&[
            ("name", Keep::All),
            ("creationTimestamp", Keep::All),
            ("deletionTimestamp", Keep::All),
            ("labels", Keep::All),
        ]),
    ),
    ("spec", Keep::Fields(&[("unschedulable", Keep::All)])),
    (
        "status",
        Keep::Fields(&[
            ("conditions", Keep::All),
            ("addresses", Keep::All),
            ("nodeInfo", Keep::All),
        ]),
    ),
]);

/// The tree of a built-in kind's row: the fields its cells read; None: every field (the
/// kinds whose objects are small, or whose cells read most of them).
pub(super) fn for_kind(kind: super::cells::Builtin) -> Option<&'static Keep> {
    use super::cells::Builtin;
    match kind {
        Builtin::Pod => Some(&POD),
        Builtin::Node => Some(&NODE),
        _ => None,
    }
}

/// `raw` parsed for a row by `keep` (None: every field, `metadata` but for its
/// `managedFields`), and its `metadata` as stored. None when `raw` is not a JSON object.
pub(super) fn parse<'a>(
    raw: &'a [u8],
    keep: Option<&'static Keep>,
) -> Option<(Value, Option<&'a RawValue>)> {
    let metadata = Cell::new(None);
    let mut de = serde_json::Deserializer::from_slice(raw);
    let obj = Top {
        keep,
        metadata: &metadata,
    }
    .deserialize(&mut de)
    .ok()?;
    de.end().ok()?;
    Some((obj, metadata.get()))
}

/// The object's top level.
struct Top<'s, 'a> {
    keep: Option<&'static Keep>,
    metadata: &'s Cell<Option<&'a RawValue>>,
}

impl<'de: 'a, 'a> DeserializeSeed<'de> for Top<'_, 'a> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for Top<'_, 'a> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Value, M::Error> {
        let fields = match self.keep {
            Some(Keep::Fields(f)) => Some(*f),
            Some(Keep::All) | None => None,
        };
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "metadata" {
                // Taken as stored, then built from those bytes: scanning them twice costs
                // less than writing them again (see the module's docs).
                let raw: &'de RawValue = map.next_value()?;
                self.metadata.set(Some(raw));
                let keep = fields.and_then(|f| f.iter().find(|(k, _)| *k == "metadata"));
                let mut de = serde_json::Deserializer::from_str(raw.get());
                let meta = match keep {
                    Some((_, keep)) => Part(keep).deserialize(&mut de),
                    None => Metadata.deserialize(&mut de),
                }
                .map_err(serde::de::Error::custom)?;
                out.insert(key, meta);
                continue;
            }
            let keep = match fields {
                None => &Keep::All,
                Some(f) => match f.iter().find(|(k, _)| *k == key) {
                    Some((_, keep)) => keep,
                    None => {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    }
                },
            };
            out.insert(key, map.next_value_seed(Part(keep))?);
        }
        Ok(Value::Object(out))
    }
}

/// `metadata`: every field built, but `managedFields`.
struct Metadata;

impl<'de> DeserializeSeed<'de> for Metadata {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Metadata {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("object metadata")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Value, M::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "managedFields" {
                map.next_value::<IgnoredAny>()?;
            } else {
                out.insert(key, map.next_value()?);
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// A value below the top level, built by its tree.
struct Part(&'static Keep);

impl<'de> DeserializeSeed<'de> for Part {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self.0 {
            Keep::All => Value::deserialize(d),
            Keep::Fields(_) => d.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Part {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Value, M::Error> {
        let Keep::Fields(fields) = self.0 else {
            unreachable!("Part visits only trees of fields")
        };
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(FieldName(fields))? {
            match key {
                Some((name, keep)) => {
                    out.insert(name.to_string(), map.next_value_seed(Part(keep))?);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Value, S::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(v) = seq.next_element_seed(Part(self.0))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// A field's name, matched against a tree's fields without allocating: the field's name and
/// tree, or None for a field to skip.
struct FieldName(&'static [(&'static str, Keep)]);

impl<'de> DeserializeSeed<'de> for FieldName {
    type Value = Option<(&'static str, &'static Keep)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for FieldName {
    type Value = Option<(&'static str, &'static Keep)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self
            .0
            .iter()
            .find(|(k, _)| *k == v)
            .map(|(k, keep)| (*k, keep)))
    }
}

/// Checks that a kind's tree keeps what its row reads.
#[cfg(test)]
pub(super) fn assert_same_row(kind: super::cells::Builtin, obj: &Value, now: i128) {
    let raw = serde_json::to_vec(obj).unwrap();
    let (projected, metadata) = parse(&raw, for_kind(kind)).expect("an object");
    let full = super::cells::row(kind, obj, now);
    let row = super::cells::row(kind, &projected, now);
    assert_eq!(
        (&row.cells, &row.conditions),
        (&full.cells, &full.conditions),
        "{kind:?}: {obj}"
    );
    let stored = metadata.map(|m| serde_json::from_str::<Value>(m.get()).unwrap());
    assert_eq!(stored.as_ref(), obj.get("metadata"));
}

#[cfg(test)]
mod tests {
    use super::super::cells::Builtin;
    use super::*;
    use kcache_sim::seed::{self, DemoSpec, FleetSpec};

    /// Every seeded object of a built-in kind (the demo cluster has each kind the sim seeds,
    /// the fleet its Pods and Nodes with full status) and every recorded Pod prints the same
    /// row from its projection as from its whole parse.
    #[test]
    fn every_kind_keeps_what_its_row_reads() {
        let now = super::super::duration::parse_time("2026-11-22T10:00:00Z").unwrap();
        let mut objects = seed::demo_cluster(&DemoSpec::default());
        objects.extend(seed::fleet(&FleetSpec { nodes: 3, seed: 7 }));
        let mut seen = std::collections::BTreeSet::new();
        for o in &objects {
            if let Some(kind) = Builtin::lookup(o.group, o.resource) {
                seen.insert(format!("{kind:?}"));
                assert_same_row(kind, &o.object, now);
            }
        }
        assert!(seen.contains("Pod") && seen.contains("Node"), "{seen:?}");
        let recorded: Value =
            serde_json::from_str(&kcache_sim::recordings::read_string("list-pods-ns-a.json"))
                .unwrap();
        for pod in recorded["items"].as_array().unwrap() {
            assert_same_row(Builtin::Pod, pod, now);
        }
    }

    #[test]
    fn fields_not_read_are_not_built() {
        let pod = serde_json::json!({
            "kind": "Pod",
            "metadata": {"name": "p", "managedFields": [{"manager": "m"}]},
            "spec": {"nodeName": "n", "volumes": [{"name": "v"}],
                     "containers": [{"name": "a", "env": [{"name": "E", "value": "1"}]}]},
            "status": {"phase": "Running", "hostIP": "10.0.0.1"},
        });
        let raw = serde_json::to_vec(&pod).unwrap();
        let (obj, metadata) = parse(&raw, for_kind(Builtin::Pod)).unwrap();
        assert_eq!(
            obj,
            serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"nodeName": "n", "containers": [{}]},
                "status": {"phase": "Running"},
            })
        );
        assert_eq!(
            metadata.unwrap().get(),
            r#"{"name":"p","managedFields":[{"manager":"m"}]}"#
        );
        assert!(parse(b"[1]", for_kind(Builtin::Pod)).is_none());
    }
}
