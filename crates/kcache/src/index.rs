//! Indexes of one resource type: their definitions (from the config plus the type's built-in
//! selectable fields), the extraction of custom field-path values from an object, and the
//! posting sets (index value → ordered store keys) the cache keeps next to its objects.
//!
//! Posting sets are persistent maps, so a snapshot takes them in O(number of indexes) and they
//! stay consistent with the snapshot's objects without copying.
//!
//! Dependencies point one way, `object` → `index`: an `Object` is built by extracting the
//! values of an [`IndexSet`], so this module does not name `Object`; it reads objects through
//! the small `Indexed` trait, which `object` implements.
//!
//! Why one file of this length: index definitions, value extraction and posting sets change
//! together whenever an index kind is added (a new `Source` is defined, extracted and posted).
//! The tests are in `index/tests.rs`.

use std::borrow::Borrow;
use std::ops::Bound;
use std::sync::Arc;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::json_view::{self, Members};
use crate::selector::{self, LabelSelector};

/// What indexing reads of a cached object: its built-in selectable fields, its labels, and the
/// values of the configured field-path indexes extracted when it was built (by
/// [`IndexSet::extract`]). Implemented by `crate::object::Object`; keeping it here, rather than
/// naming `Object`, is what keeps `index` free of a dependency back on `object`.
pub(crate) trait Indexed {
    /// Value of a built-in selectable field (see `crate::selector::extract_fields`).
    fn field(&self, name: &str) -> Option<&str>;
    /// Value of a label.
    fn label(&self, key: &str) -> Option<&str>;
    /// Values extracted for the field-path index in `slot`.
    fn index_values(&self, slot: u16) -> impl Iterator<Item = &str>;
}

/// Shared objects (the cache holds `Arc<Object>`) are read through the pointer.
impl<T: Indexed + ?Sized> Indexed for Arc<T> {
    fn field(&self, name: &str) -> Option<&str> {
        (**self).field(name)
    }

    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }

    fn index_values(&self, slot: u16) -> impl Iterator<Item = &str> {
        (**self).index_values(slot)
    }
}

/// One index as written in the config: `{name, field}` or `{name, label}`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IndexConfig {
    pub name: String,
    /// A field path: dotted keys, `[*]` after a key for every element of a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// A label key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl IndexConfig {
    /// Check the definition; the error says what is wrong (the caller names the field).
    pub(crate) fn validate(&self) -> Result<(), String> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 63
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            return Err(format!(
                "index name {:?} must be 1-63 letters, digits, '-' or '_'",
                self.name
            ));
        }
        match (&self.field, &self.label) {
            (Some(f), None) => FieldPath::parse(f).map(|_| ()),
            (None, Some(l)) => {
                // A bare key is an Exists requirement: parsing it validates the key.
                match LabelSelector::parse(l) {
                    Ok(s) if s.requirements().len() == 1 && s.requirements()[0].key == *l => Ok(()),
                    _ => Err(format!("{l:?} is not a valid label key")),
                }
            }
            _ => Err("exactly one of field or label is needed".into()),
        }
    }
}

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    key: String,
    /// `key[*]`: every element of the list under `key`.
    each: bool,
}

/// A field path such as `spec.containers[*].image`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldPath {
    steps: Vec<Step>,
    /// The path as written in the config.
    text: String,
    /// The path without `[*]`: how field selectors name it (`spec.containers.image`).
    plain: String,
}

impl FieldPath {
    pub(crate) fn parse(s: &str) -> Result<FieldPath, String> {
        let mut steps = Vec::new();
        for part in s.split('.') {
            let (key, each) = match part.strip_suffix("[*]") {
                Some(k) => (k, true),
                None => (part, false),
            };
            if key.is_empty() || key.contains(['[', ']', '*', ',', '=', '!', ' ']) {
                return Err(format!(
                    "{s:?} is not a field path like spec.containers[*].image"
                ));
            }
            steps.push(Step {
                key: key.to_string(),
                each,
            });
        }
        let plain = steps
            .iter()
            .map(|s| s.key.as_str())
            .collect::<Vec<_>>()
            .join(".");
        Ok(FieldPath {
            steps,
            text: s.to_string(),
            plain,
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// The field-selector spelling (no `[*]`).
    pub(crate) fn plain(&self) -> &str {
        &self.plain
    }

    /// Every scalar value at the path, rendered as the apiserver renders field values
    /// (strings as they are, numbers and booleans as text); null, objects and lists without
    /// `[*]` give nothing. Strings without escapes are slices of the object's text.
    fn values<'a>(&self, obj: &Members<'a>, out: &mut Vec<Cow<'a, str>>) {
        fn leaf<'a>(v: &'a RawValue, out: &mut Vec<Cow<'a, str>>) {
            if let Some(s) = json_view::as_str(v) {
                out.push(s);
            } else if let Some(b) = json_view::as_bool(v) {
                out.push(Cow::Borrowed(if b { "true" } else { "false" }));
            } else if let Some(n) = json_view::as_number(v) {
                out.push(Cow::Owned(n.to_string()));
            }
        }
        fn walk<'a>(obj: &Members<'a>, steps: &[Step], out: &mut Vec<Cow<'a, str>>) {
            let Some((step, rest)) = steps.split_first() else {
                return;
            };
            let Some(next) = obj.get(&step.key) else {
                return;
            };
            let items = if step.each {
                json_view::elements(next)
            } else {
                vec![next]
            };
            for item in items {
                if rest.is_empty() {
                    leaf(item, out);
                } else {
                    walk(&Members::of(item), rest, out);
                }
            }
        }
        walk(obj, &self.steps, out);
    }
}

/// Where an index takes its values from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// A built-in selectable field (one value, `""` when unset), read from the object's head.
    Field(&'static str),
    /// A label (one value, none when the label is absent).
    Label(String),
    /// A configured field path; its values are extracted once into the object's `slot`.
    Path { path: FieldPath, slot: u16 },
    /// A field a CRD declares in `selectableFields` (named by its jsonPath without the leading
    /// `.`): one value per object, extracted into `slot`, `""` when absent, so that the index's
    /// `=`/`!=` are the apiserver's.
    Selectable { path: FieldPath, slot: u16 },
}

/// One index of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexDef {
    pub name: String,
    pub source: Source,
}

/// The indexes of one resource type, in a fixed order (posting sets are kept in that order).
#[derive(Debug, Clone, Default)]
pub struct IndexSet {
    defs: Vec<IndexDef>,
}

impl IndexSet {
    /// The type's built-in selectable fields plus the configured indexes (already validated).
    pub fn new(group: &str, resource: &str, custom: bool, configured: &[IndexConfig]) -> IndexSet {
        let spec = selector::field_spec(group, resource, custom);
        let mut defs: Vec<IndexDef> = spec
            .extra
            .iter()
            // Client aliases read the same value as their target, and status.podIPs is always
            // "" (absent from the pod field set): indexing them would only cost memory.
            .filter(|f| !spec.aliases.iter().any(|(from, _)| from == *f) && **f != "status.podIPs")
            .map(|f| IndexDef {
                name: f.to_string(),
                source: Source::Field(f),
            })
            .collect();
        let mut slot = 0u16;
        for c in configured {
            let source = match (&c.field, &c.label) {
                (Some(f), _) => match FieldPath::parse(f) {
                    Ok(path) => {
                        slot += 1;
                        Source::Path {
                            path,
                            slot: slot - 1,
                        }
                    }
                    Err(_) => continue,
                },
                (None, Some(l)) => Source::Label(l.clone()),
                (None, None) => continue,
            };
            defs.push(IndexDef {
                name: c.name.clone(),
                source,
            });
        }
        IndexSet { defs }
    }

    /// The same set plus a custom resource's `selectableFields` (jsonPaths as the CRD writes
    /// them, `.spec.color`). A path kcache cannot read (array notation, quoting) is left out:
    /// selectors on it then go to the upstream.
    pub(crate) fn with_selectable_fields(mut self, json_paths: &[String]) -> IndexSet {
        let mut slot = self
            .defs
            .iter()
            .filter_map(|d| match &d.source {
                Source::Path { slot, .. } | Source::Selectable { slot, .. } => Some(slot + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        for p in json_paths {
            let Some(name) = p.strip_prefix('.') else {
                continue;
            };
            let Ok(path) = FieldPath::parse(name) else {
                continue;
            };
            if path.steps.iter().any(|s| s.each) || self.by_selectable_field(name).is_some() {
                continue;
            }
            self.defs.push(IndexDef {
                name: name.to_string(),
                source: Source::Selectable { path, slot },
            });
            slot += 1;
        }
        self
    }

    pub(crate) fn defs(&self) -> &[IndexDef] {
        &self.defs
    }

    pub(crate) fn len(&self) -> usize {
        self.defs.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    /// The index on a built-in selectable field.
    pub(crate) fn by_field(&self, field: &str) -> Option<usize> {
        self.defs
            .iter()
            .position(|d| matches!(d.source, Source::Field(f) if f == field))
    }

    /// The index on a label key.
    pub(crate) fn by_label(&self, key: &str) -> Option<usize> {
        self.defs
            .iter()
            .position(|d| matches!(&d.source, Source::Label(l) if l == key))
    }

    /// The configured field-path index a field selector names: by its path without `[*]`, or
    /// by the index name.
    pub fn by_selector_field(&self, field: &str) -> Option<(usize, u16)> {
        self.defs
            .iter()
            .enumerate()
            .find_map(|(i, d)| match &d.source {
                Source::Path { path, slot } if path.plain() == field || d.name == field => {
                    Some((i, *slot))
                }
                _ => None,
            })
    }

    /// The index on a CRD selectable field a field selector names.
    pub fn by_selectable_field(&self, field: &str) -> Option<(usize, u16)> {
        self.defs
            .iter()
            .enumerate()
            .find_map(|(i, d)| match &d.source {
                Source::Selectable { slot, .. } if d.name == field => Some((i, *slot)),
                _ => None,
            })
    }

    /// The index called `name`.
    pub(crate) fn by_name(&self, name: &str) -> Option<usize> {
        self.defs.iter().position(|d| d.name == name)
    }

    /// The configured field-path and selectable-field values of one object, as stored on it:
    /// (slot, value) sorted, without duplicates. Empty (no allocation) when the resource has
    /// no such index. Values are slices of the object's text where it has them unescaped.
    pub(crate) fn extract<'a>(&self, obj: &Members<'a>) -> Vec<(u16, Cow<'a, str>)> {
        let mut out: Vec<(u16, Cow<'a, str>)> = Vec::new();
        let mut buf = Vec::new();
        for d in &self.defs {
            match &d.source {
                Source::Path { path, slot } => {
                    buf.clear();
                    path.values(obj, &mut buf);
                    out.extend(buf.drain(..).map(|v| (*slot, v)));
                }
                Source::Selectable { path, slot } => {
                    buf.clear();
                    path.values(obj, &mut buf);
                    // The schema makes it one scalar; anything else reads as absent.
                    let v = match buf.as_mut_slice() {
                        [one] => std::mem::take(one),
                        _ => Cow::Borrowed(""),
                    };
                    out.push((*slot, v));
                }
                _ => {}
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Whether any index reads configured paths (then objects are read for them).
    pub(crate) fn has_paths(&self) -> bool {
        self.defs
            .iter()
            .any(|d| matches!(d.source, Source::Path { .. } | Source::Selectable { .. }))
    }

    /// Call `f` with every value object `o` has for index `i`.
    pub(crate) fn for_each_value<'o, O: Indexed>(
        &self,
        i: usize,
        o: &'o O,
        mut f: impl FnMut(&'o str),
    ) {
        match &self.defs[i].source {
            Source::Field(name) => f(o.field(name).unwrap_or("")),
            Source::Label(key) => {
                if let Some(v) = o.label(key) {
                    f(v)
                }
            }
            Source::Path { slot, .. } | Source::Selectable { slot, .. } => {
                o.index_values(*slot).for_each(f)
            }
        }
    }

    /// Whether `a` and `b` have the same values for index `i` (then the posting sets need no
    /// change on an update).
    fn same_values<O: Indexed>(&self, i: usize, a: &O, b: &O) -> bool {
        match &self.defs[i].source {
            Source::Field(name) => a.field(name) == b.field(name),
            Source::Label(key) => a.label(key) == b.label(key),
            Source::Path { slot, .. } | Source::Selectable { slot, .. } => {
                a.index_values(*slot).eq(b.index_values(*slot))
            }
        }
    }
}

/// Store keys with one index value, in key order. `K` is what a set holds per object
/// (`object::Key` in the cache: one pointer), ordered as its key text.
///
/// Most values of many indexes are held by one or a few objects (pod IPs, event UIDs): a
/// persistent B-tree node costs hundreds of bytes, so small sets are a shared sorted slice
/// (an update copies at most `FEW_MAX` pointers) and only larger ones a persistent set.
#[derive(Clone)]
pub(crate) enum KeySet<K> {
    Few(Arc<[K]>),
    Many(imbl::OrdSet<K>),
}

/// Largest slice before a set turns persistent; it turns back below half of it.
const FEW_MAX: usize = 16;

impl<K: Clone + Ord + Borrow<str>> KeySet<K> {
    /// The set of `keys`, given sorted (they are sorted here should they not be).
    pub(crate) fn from_sorted(mut keys: Vec<K>) -> KeySet<K> {
        if !keys.is_sorted() {
            keys.sort();
        }
        keys.dedup();
        if keys.len() <= FEW_MAX {
            return KeySet::Few(keys.into());
        }
        let mut set = imbl::OrdSet::new();
        dense_order(&keys, |k| {
            set.insert(k.clone());
        });
        KeySet::Many(set)
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            KeySet::Few(k) => k.len(),
            KeySet::Many(k) => k.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys within `range`, in order.
    pub(crate) fn range<'a>(
        &'a self,
        range: (Bound<Arc<str>>, Bound<Arc<str>>),
    ) -> Box<dyn Iterator<Item = &'a K> + 'a> {
        let (lower, upper) = (
            range.0.as_ref().map(|s| &**s),
            range.1.as_ref().map(|s| &**s),
        );
        match self {
            KeySet::Many(k) => Box::new(k.range::<_, str>((lower, upper))),
            KeySet::Few(k) => {
                fn at<K: Borrow<str>>(x: &K) -> &str {
                    x.borrow()
                }
                let start = match lower {
                    Bound::Included(s) => k.partition_point(|x| at(x) < s),
                    Bound::Excluded(s) => k.partition_point(|x| at(x) <= s),
                    Bound::Unbounded => 0,
                };
                let end = match upper {
                    Bound::Included(e) => k.partition_point(|x| at(x) <= e),
                    Bound::Excluded(e) => k.partition_point(|x| at(x) < e),
                    Bound::Unbounded => k.len(),
                };
                Box::new(k[start..end.max(start)].iter())
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn iter(&self) -> Box<dyn Iterator<Item = &K> + '_> {
        self.range((Bound::Unbounded, Bound::Unbounded))
    }

    /// Add `key`, or replace the entry with its text: the set then holds the `key` given
    /// (in the cache, the object's current version; see `object::Key`).
    fn insert(&mut self, key: &K) {
        match self {
            KeySet::Many(k) => {
                k.insert(key.clone());
            }
            KeySet::Few(k) => match k.binary_search(key) {
                Ok(at) => {
                    let mut v = k.to_vec();
                    v[at] = key.clone();
                    *k = v.into();
                }
                Err(at) if k.len() < FEW_MAX => {
                    let mut v = Vec::with_capacity(k.len() + 1);
                    v.extend_from_slice(&k[..at]);
                    v.push(key.clone());
                    v.extend_from_slice(&k[at..]);
                    *k = v.into();
                }
                Err(_) => {
                    let mut set: imbl::OrdSet<K> = k.iter().cloned().collect();
                    set.insert(key.clone());
                    *self = KeySet::Many(set);
                }
            },
        }
    }

    fn remove(&mut self, key: &str) {
        match self {
            KeySet::Many(k) => {
                k.remove(key);
                if k.len() < FEW_MAX / 2 {
                    *self = KeySet::Few(k.iter().cloned().collect());
                }
            }
            KeySet::Few(k) => {
                if let Ok(at) = k.binary_search_by(|x| x.borrow().cmp(key)) {
                    let v: Vec<K> = k[..at].iter().chain(&k[at + 1..]).cloned().collect();
                    *k = v.into();
                }
            }
        }
    }
}

/// Call `insert` with every one of `sorted` (sorted items bound for a persistent B-tree:
/// `imbl::OrdMap` or `OrdSet`) in an order that leaves the tree's leaves full.
///
/// A leaf of those trees that overflows is split in two halves, so inserting in key order
/// leaves every leaf half full: twice the memory per entry (a map of 100k objects holds
/// ~26 bytes more per object, each posting set ~18 bytes more per key). Inserting every
/// other item first builds those half-full leaves with the gaps between their keys; the
/// remaining items then fill each leaf's gaps exactly, without splitting it.
pub(crate) fn dense_order<T>(sorted: &[T], mut insert: impl FnMut(&T)) {
    sorted.iter().step_by(2).for_each(&mut insert);
    sorted.iter().skip(1).step_by(2).for_each(insert);
}

/// The posting sets of every index of a resource: value → keys, per index in [`IndexSet`]
/// order.
#[derive(Clone)]
pub(crate) struct Postings<K> {
    maps: Vec<imbl::HashMap<Arc<str>, KeySet<K>>>,
}

impl<K: Clone + Ord + Borrow<str>> Postings<K> {
    pub(crate) fn new(set: &IndexSet) -> Postings<K> {
        Postings {
            maps: vec![imbl::HashMap::new(); set.len()],
        }
    }

    /// Posting sets built from scratch for a whole collection, given in key order.
    ///
    /// Each value's keys are gathered first and its set made once from them (see
    /// [`KeySet::from_sorted`]), rather than growing it one insert at a time: no slice is
    /// copied per insert, and large sets get full tree nodes.
    pub(crate) fn build<'a, O: Indexed + 'a>(
        set: &IndexSet,
        objects: impl Iterator<Item = (&'a K, &'a O)>,
    ) -> Postings<K>
    where
        K: 'a,
    {
        let mut gathered: Vec<std::collections::HashMap<&'a str, Vec<K>>> =
            vec![std::collections::HashMap::new(); set.len()];
        for (k, o) in objects {
            for (i, values) in gathered.iter_mut().enumerate() {
                set.for_each_value(i, o, |v| {
                    let keys = values.entry(v).or_default();
                    // A value repeated within one object is one posting.
                    if keys.last() != Some(k) {
                        keys.push(k.clone());
                    }
                });
            }
        }
        Postings {
            maps: gathered
                .into_iter()
                .map(|values| {
                    values
                        .into_iter()
                        .map(|(v, keys)| (Arc::from(v), KeySet::from_sorted(keys)))
                        .collect()
                })
                .collect(),
        }
    }

    /// The keys with `value` for index `i`.
    pub(crate) fn get(&self, i: usize, value: &str) -> Option<&KeySet<K>> {
        self.maps.get(i)?.get(value)
    }

    /// Every value of index `i` with its keys.
    pub(crate) fn values(&self, i: usize) -> impl Iterator<Item = (&Arc<str>, &KeySet<K>)> {
        self.maps.get(i).into_iter().flat_map(|m| m.iter())
    }

    /// Every (index, value, keys) in a stable order, for comparisons in tests.
    #[cfg(test)]
    pub(crate) fn dump(&self) -> Vec<(usize, String, Vec<String>)> {
        let mut out: Vec<_> = self
            .maps
            .iter()
            .enumerate()
            .flat_map(|(i, m)| {
                m.iter().map(move |(v, keys)| {
                    (
                        i,
                        v.to_string(),
                        keys.iter()
                            .map(|k| Borrow::<str>::borrow(k).to_string())
                            .collect(),
                    )
                })
            })
            .collect();
        out.sort();
        out
    }

    /// An estimate of the bytes the posting sets hold: per value its text and map entry, per
    /// key a pointer (small sets) or a persistent-set entry (nodes full after a build, half
    /// full where they were split by later inserts).
    pub(crate) fn memory(&self) -> usize {
        let entry = std::mem::size_of::<(Arc<str>, KeySet<K>)>() + 16;
        let key = std::mem::size_of::<K>();
        self.maps
            .iter()
            .flat_map(|m| m.iter())
            .map(|(value, keys)| {
                let keys = match keys {
                    KeySet::Few(k) => 16 + k.len() * key,
                    KeySet::Many(k) => k.len() * 5 / 4 * key,
                };
                entry + 16 + value.len() + keys
            })
            .sum()
    }

    /// The object at `key` changed from `old` to `new` (None: absent). Every set holding the
    /// object afterwards holds the `key` given, even where its values did not change.
    pub(crate) fn update<O: Indexed>(
        &mut self,
        set: &IndexSet,
        key: &K,
        old: Option<&O>,
        new: Option<&O>,
    ) {
        for (i, map) in self.maps.iter_mut().enumerate() {
            let same = matches!((old, new), (Some(a), Some(b)) if set.same_values(i, a, b));
            if let (Some(o), false) = (old, same) {
                set.for_each_value(i, o, |v| {
                    let emptied = map.get_mut(v).is_some_and(|keys| {
                        keys.remove(key.borrow());
                        keys.is_empty()
                    });
                    if emptied {
                        map.remove(v);
                    }
                });
            }
            if let Some(o) = new {
                set.for_each_value(i, o, |v| {
                    match map.get_mut(v) {
                        Some(keys) => keys.insert(key),
                        None => {
                            map.insert(Arc::from(v), KeySet::Few(Arc::from([key.clone()])));
                        }
                    };
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
