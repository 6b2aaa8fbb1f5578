//! A GET, LIST or WATCH of a cached type, parsed once ([`ReadRequest`]), in these steps, in
//! this order:
//!
//! 1. Decide from what is known at no cost: what the cache holds ([`policy::Held`]) and the
//!    request become one [`Decision`] ([`policy::decide`]): passed through, refused with a
//!    Status, or answered from the cache with a given state. What only the upstream could tell
//!    (a Table printer's columns not fetched yet, a protobuf mirror not started) is taken at
//!    its best here, so a read this step passes through would be passed through whatever the
//!    upstream said.
//! 2. Authorize: the caller's permission, asked of the upstream's authorizer before anything
//!    of the cache is looked at, a refusal included (which would otherwise tell an
//!    unauthorized caller about the cache), and before anything that costs the upstream or
//!    kcache's memory is done on the caller's behalf (a Table's columns, a protobuf mirror, a
//!    proof or probe of a consistent read). A read passed through is authorized upstream.
//! 3. Gather what the decision needs that costs (the printer, the mirror), and decide again
//!    where one of them changed a fact step 1 took at its best.
//! 4. For a consistent read, whether the cache is current and so where the read is answered
//!    (`ConsistentReader::decide`).
//! 5. Read and encode ([`get::get`], [`list::list`], [`watch::watch`]): the answer from the
//!    cache's state, in the representation asked for. What the cache only finds out while
//!    reading (a state it no longer holds, a protobuf mirror behind the cache) goes as the
//!    decision's [`policy::Otherwise`] says, or upstream.

use std::sync::Arc;

use super::consistent::{Consistency, Placed, UNCONFIRMED_HEADER};
use super::list::{self, ListSettings};
use super::negotiate::Representation;
use super::policy::{self, Decision, Want};
use super::request::{Listing, Options, ReadRequest, Verb};
use super::{get, response, watch};
use super::{Answer, AnsweredBy, App, Form};
use crate::auth::{Attributes, Caller, Verdict};
use crate::cache::{Mirror, ResourceCache};
use crate::printers::Known;
use crate::registry::Served;
use crate::status::ApiError;
use crate::table::Printer;

/// A read of a cached type (`served`: the type as the request found it): decided, authorized,
/// then read (see the module docs). `verdict`: set to the authorizer's answer once it is asked
/// (for the audit trail).
pub(super) async fn from_cache(
    app: &App,
    read: &ReadRequest<'_>,
    caller: &Caller,
    served: &Served,
    verdict: &mut Option<Verdict>,
) -> Result<Answer, ApiError> {
    let cache = &served.cache;
    // 1. Decide at no cost. A Table read's printer is what its type's slot knows now.
    let known = (read.representation == Representation::Table).then(|| served.printer.known());
    let held = held(cache, known.as_ref());
    let decision = policy::decide(read, &held);
    if let Decision::Upstream(why) = decision {
        tracing::debug!(resource = %cache.info, %why, "forwarded");
        return Ok(Answer::Upstream);
    }
    // 2. Authorize.
    authorize(app, caller, read, cache, verdict).await?;
    // 3. What answering needs, and the decision with it.
    let Decided {
        decision,
        held,
        printer,
        mirror,
    } = decide(app, read, served, known, held, decision).await;
    // 4. A consistent read: is the cache current?
    let (want, consistency) = match decision {
        Decision::Refuse(error) => return Err(error),
        Decision::Upstream(why) => {
            tracing::debug!(resource = %cache.info, %why, "forwarded");
            return Ok(Answer::Upstream);
        }
        Decision::Cache(want) => (want, None),
        Decision::Consistent { limit } => {
            let reader = app.consistent_reader(read, limit, served);
            match reader.decide(held.synced).await? {
                Placed::Cache(found) => (Want::Latest { limit }, Some(found)),
                Placed::Upstream if read.verb == Verb::Watch => return Ok(Answer::Upstream),
                Placed::Upstream => return Ok(Answer::Consistent(reader.forwarded())),
            }
        }
    };
    // 5. Read and encode.
    let form = Forms {
        read,
        printer: printer.as_deref(),
        mirror: mirror.as_ref(),
    };
    let answer = match (&read.options, read.verb) {
        (Options::Get(opts), _) => {
            let path = read.path;
            let name = path.name.as_deref().unwrap_or_default();
            let key = match path.namespace.as_deref() {
                Some(ns) => format!("{ns}/{name}"),
                None => name.to_string(),
            };
            let pretty = response::wants_pretty(opts.pretty, read.user_agent);
            get::get(cache, &key, name, &want, app.rv_wait, form.of(pretty)).await
        }
        (Options::List(Ok(listing)), Verb::Watch) => {
            render_watch(app, listing, form, printer.clone(), mirror.clone(), cache).await
        }
        (Options::List(Ok(listing)), _) => {
            let pretty = response::wants_pretty(listing.opts.pretty, read.user_agent);
            let settings = ListSettings {
                rv_wait: app.rv_wait,
                limits: &app.limits,
                tokens: app.upstream.version().token_form(),
            };
            list::list(cache, &want, &listing.filter, form.of(pretty), &settings).await
        }
        // Decided refused above.
        (Options::List(Err(e)), _) => Err(e.clone()),
    };
    mark_consistent(answer, consistency)
}

/// What step 3 found: the decision, and what answering from the cache needs of what it
/// looked up.
struct Decided {
    decision: Decision,
    /// What the cache held when the read was decided, its facts taken once.
    held: policy::Held,
    /// The Table printer, for a Table read.
    printer: Option<Arc<Printer>>,
    /// The type's protobuf mirror, for a protobuf read.
    mirror: Option<Arc<Mirror>>,
}

/// Step 1's facts: what the cache holds, with what only the upstream could tell taken at its
/// best (a printer not built yet prints from metadata, a mirror is ready); `known`: what the
/// type's printer slot knows, for a Table read.
fn held(cache: &ResourceCache, known: Option<&Known>) -> policy::Held {
    let printer = match known {
        Some(Known::Printer(p)) => printable(p),
        Some(Known::Unprintable) | None => policy::Printable::No,
        Some(Known::Unknown) => policy::Printable::FromMetadata,
    };
    policy::Held {
        namespaced: cache.info.namespaced,
        synced: cache.is_synced(),
        metadata_only: cache.strip().metadata_only,
        mirror_ready: true,
        bookmark_object: cache
            .mirror()
            .is_some_and(|m| m.bookmark_object().is_some()),
        printer,
    }
}

fn printable(printer: &Printer) -> policy::Printable {
    if printer.reads_only_metadata() {
        policy::Printable::FromMetadata
    } else {
        policy::Printable::NeedsObject
    }
}

/// Step 3, for an authorized caller: gather what [`policy::decide`] asks about that costs (a
/// Table's printer, whose columns may come from the upstream once per type; the protobuf
/// mirror, a second upstream list and watch of the type) and ask it again only where that
/// changed a fact `decision` (step 1's) was made with. `known`: what the type's printer slot
/// knew at step 1, for a Table read; a type's printer, once built, is known there, so a read of
/// a type already printed fetches nothing and decides once.
async fn decide(
    app: &App,
    read: &ReadRequest<'_>,
    served: &Served,
    known: Option<Known>,
    mut held: policy::Held,
    mut decision: Decision,
) -> Decided {
    let cache = &served.cache;
    let printer = match known {
        Some(Known::Printer(printer)) => Some(printer),
        Some(Known::Unprintable) | None => None,
        Some(Known::Unknown) => {
            let printer = served.printer.get(&app.upstream, cache).await;
            let printable = printer.as_deref().map_or(policy::Printable::No, printable);
            if printable != held.printer {
                held.printer = printable;
                decision = policy::decide(read, &held);
            }
            printer
        }
    };
    // The protobuf mirror is started by the first protobuf read the cache would otherwise
    // answer, so the policy is asked first as if it were ready; a read that goes upstream for
    // another reason starts none. Until the mirror has synced, a client that accepts JSON after
    // protobuf is answered in JSON from the cache (client-go decodes by the Content-Type, as
    // with `cache.protobuf: false`); only a protobuf-only one goes upstream. Forwarding them
    // all instead would send a restarted kcache's returning clients (a herd of thousands of
    // watches, docs/scaling.md) upstream while the mirror lists the type.
    let answered = matches!(decision, Decision::Cache(_) | Decision::Consistent { .. });
    let mirror = match read.representation {
        Representation::Protobuf if answered => {
            let mirror = app.mirrors.ready(cache);
            if mirror.is_none() && !read.json_after_protobuf {
                held.mirror_ready = false;
                decision = policy::decide(read, &held);
            }
            mirror
        }
        _ => None,
    };
    Decided {
        decision,
        held,
        printer,
        mirror,
    }
}

/// Step 2: the cache holds what kcache may read; the caller may read only what the
/// upstream's authorizer allows them.
async fn authorize(
    app: &App,
    caller: &Caller,
    read: &ReadRequest<'_>,
    cache: &ResourceCache,
    verdict: &mut Option<Verdict>,
) -> Result<(), ApiError> {
    let info = &cache.info;
    let path = read.path;
    app.auth
        .authorize(
            caller,
            &Attributes {
                verb: read.verb.as_str(),
                group: &info.group,
                version: &path.version,
                resource: &info.resource,
                namespace: path.namespace.as_deref(),
                name: path.name.as_deref(),
            },
            verdict,
        )
        .await?;
    Ok(())
}

/// How an answer from the cache is rendered, from the request's representation and what
/// deciding looked up.
#[derive(Clone, Copy)]
struct Forms<'a> {
    read: &'a ReadRequest<'a>,
    printer: Option<&'a Printer>,
    mirror: Option<&'a Arc<Mirror>>,
}

impl<'a> Forms<'a> {
    fn of(self, pretty: bool) -> Form<'a> {
        match (self.printer, self.read.representation) {
            (Some(printer), _) => Form::Table {
                printer,
                // Refused when invalid, before this (the policy's rule 7).
                include: self.read.include.clone().unwrap_or_default(),
            },
            (None, Representation::Json) => Form::Json { pretty },
            (None, Representation::Protobuf) => match self.mirror {
                Some(m) => Form::Protobuf(m),
                None => Form::Json { pretty },
            },
            (None, _) => Form::Metadata,
        }
    }
}

/// A WATCH.
async fn render_watch(
    app: &App,
    listing: &Listing,
    form: Forms<'_>,
    printer: Option<Arc<Printer>>,
    mirror: Option<Arc<Mirror>>,
    cache: &Arc<ResourceCache>,
) -> Result<Answer, ApiError> {
    let encoding = match (form.of(false), printer, mirror) {
        (Form::Table { include, .. }, Some(printer), _) => {
            watch::Encoding::Table { printer, include }
        }
        (Form::Metadata, _, _) => watch::Encoding::Metadata,
        (Form::Protobuf(_), _, Some(mirror)) => watch::Encoding::Protobuf(mirror),
        _ => watch::Encoding::Json,
    };
    let resp = watch::watch(
        cache.clone(),
        listing.filter.clone(),
        &listing.opts,
        &app.watch,
        app.stopping.subscribe(),
        encoding,
        &app.metrics,
    )
    .await;
    resp.map(Answer::Ready)
}

/// Mark a consistent read's answer from the cache with how the cache was shown current (an
/// [`AnsweredBy`] extension, for its audit events), and as unconfirmed when it is one (`c`:
/// the decision of a consistent read, None for a read that was not one).
fn mark_consistent(
    answer: Result<Answer, ApiError>,
    c: Option<Consistency>,
) -> Result<Answer, ApiError> {
    match answer {
        Ok(Answer::Ready(mut resp)) if c == Some(Consistency::Unconfirmed) => {
            resp.headers_mut()
                .insert(UNCONFIRMED_HEADER, http::HeaderValue::from_static("true"));
            resp.extensions_mut().insert(AnsweredBy::Unconfirmed);
            Ok(Answer::Ready(resp))
        }
        Ok(Answer::Ready(mut resp)) if c == Some(Consistency::Cache) => {
            resp.extensions_mut().insert(AnsweredBy::Proven);
            Ok(Answer::Ready(resp))
        }
        other => other,
    }
}
