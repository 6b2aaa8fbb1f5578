use super::*;

/// The error with its cause (the YAML error of a parse failure).
fn text(e: &ConfigError) -> String {
    crate::error::Report(e).to_string()
}

#[test]
fn the_shipped_example_is_valid() {
    let text = include_str!("../../../../config/kcache.yaml");
    let c = Config::parse(text).unwrap();
    assert!(!c.resources.is_empty());
}

#[test]
fn errors_name_the_field() {
    let e = Config::parse(
        "resources:\n- version: v1\n  resource: pods\n  labelSelector: 'app in (x'\n",
    )
    .unwrap_err();
    assert!(text(&e).starts_with("resources[0].labelSelector:"), "{e}");
    let e = Config::parse("resources:\n- resource: pods\n").unwrap_err();
    assert!(text(&e).contains("version"), "{e}");
    let e = Config::parse(
            "resources:\n- version: v1\n  resource: pods\n  indexes: [{name: ok, label: app}, {name: byImage, field: 'spec.[*]'}]\n",
        )
        .unwrap_err();
    assert!(text(&e).starts_with("resources[0].indexes[1]:"), "{e}");
    let e = Config::parse("bogus: 1\n").unwrap_err();
    assert!(text(&e).contains("bogus"), "{e}");
    let e = Config::parse("listen: nowhere\n").unwrap_err();
    assert!(text(&e).starts_with("listen:"), "{e}");
    let e = Config::parse("adminListen: nowhere\n").unwrap_err();
    assert!(text(&e).starts_with("adminListen:"), "{e}");
    let e = Config::parse("listen: 127.0.0.1:9000\nadminListen: 127.0.0.1:9000\n").unwrap_err();
    assert!(text(&e).starts_with("adminListen:"), "{e}");
    // Any free port for both is fine (tests do that).
    Config::parse("listen: 127.0.0.1:0\nadminListen: 127.0.0.1:0\n").unwrap();
}

#[test]
fn metadata_only_caches_can_select_and_index_metadata_only() {
    let c = Config::parse(
            "resources:\n- version: v1\n  resource: secrets\n  metadataOnly: true\n  fieldSelector: metadata.namespace=a\n  indexes: [{name: byOwner, field: 'metadata.ownerReferences[*].name'}, {name: byApp, label: app}]\n",
        )
        .unwrap();
    assert!(c.cache_config_for(&c.resources[0]).strip.metadata_only);
    let e = Config::parse(
            "resources:\n- version: v1\n  resource: pods\n  metadataOnly: true\n  fieldSelector: spec.nodeName=n1\n",
        )
        .unwrap_err();
    assert!(text(&e).starts_with("resources[0].fieldSelector:"), "{e}");
    let e = Config::parse(
            "resources:\n- version: v1\n  resource: pods\n  metadataOnly: true\n  indexes: [{name: byNode, field: spec.nodeName}]\n",
        )
        .unwrap_err();
    assert!(text(&e).starts_with("resources[0].indexes[0]:"), "{e}");
    // Not set: whole objects, as before.
    let c = Config::parse("resources:\n- version: v1\n  resource: pods\n").unwrap();
    assert!(!c.cache_config_for(&c.resources[0]).strip.metadata_only);
}

#[test]
fn persist_dir_is_optional_in_the_cache_section() {
    assert_eq!(Config::parse("{}").unwrap().cache.persist_dir, None);
    let c = Config::parse(
            "cache: {historyWindowSeconds: 300, historyMaxEvents: 10, protobuf: true, persistDir: /var/lib/kcache}\n",
        )
        .unwrap();
    assert_eq!(c.cache.persist_dir, Some(PathBuf::from("/var/lib/kcache")));
    let c = Config::parse("cache: {historyWindowSeconds: 300, historyMaxEvents: 10}\n").unwrap();
    assert_eq!(c.cache.persist_dir, None);
    // The section's other keys may be left out (every key is optional at every depth).
    let c = Config::parse("cache: {persistDir: /var/lib/kcache}\n").unwrap();
    assert_eq!(c.cache.persist_dir, Some(PathBuf::from("/var/lib/kcache")));
    assert_eq!(c.cache_config().history_window, Duration::from_secs(300));
    assert!(c.protobuf_enabled());
    let e =
        Config::parse("cache: {historyWindowSeconds: 300, historyMaxEvents: 10, persistDir: ''}\n")
            .unwrap_err();
    assert!(text(&e).starts_with("cache.persistDir:"), "{e}");
}

#[test]
fn tls_section() {
    let c = Config::parse(
            "tls: {certFile: /c.pem, keyFile: /k.pem, clientCAFile: /ca.pem, reloadIntervalSeconds: 2}\n",
        )
        .unwrap();
    assert!(c.tls.enabled());
    assert_eq!(c.tls.client_ca_file, Some(PathBuf::from("/ca.pem")));
    assert_eq!(c.tls.reload_interval(), Duration::from_secs(2));
    let c = Config::parse("tls: {certFile: /c.pem, keyFile: /k.pem}\n").unwrap();
    assert_eq!(c.tls.reload_interval_seconds, 10);
    for (yaml, field) in [
        ("tls: {certFile: /c.pem}", "tls.keyFile:"),
        ("tls: {keyFile: /k.pem}", "tls.certFile:"),
        ("tls: {clientCAFile: /ca.pem}", "tls.clientCAFile:"),
        ("tls: {certFile: '', keyFile: /k.pem}", "tls.certFile:"),
        (
            "tls: {certFile: /c.pem, keyFile: /k.pem, reloadIntervalSeconds: 0}",
            "tls.reloadIntervalSeconds:",
        ),
    ] {
        let e = Config::parse(yaml).unwrap_err();
        assert!(text(&e).starts_with(field), "{yaml}: {e}");
    }
    let e = Config::parse("tls: {certfile: /c.pem}").unwrap_err();
    assert!(text(&e).contains("certfile"), "{e}");
}

#[test]
fn staleness_section() {
    let c = Config::parse("staleness:\n  maxConsistentReadStalenessSeconds: 2\n").unwrap();
    let s = c.staleness();
    assert_eq!(s.max_consistent_read, Some(Duration::from_secs(2)));
    assert_eq!(s.upstream_request_timeout, Duration::from_secs(30));
    assert_eq!(
        Config::default().staleness().max_consistent_read,
        Some(Duration::from_secs(120))
    );
    let e = Config::parse("staleness:\n  upstreamRequestTimeoutSeconds: 0\n").unwrap_err();
    assert!(
        text(&e).starts_with("staleness.upstreamRequestTimeoutSeconds:"),
        "{e}"
    );
    let e = Config::parse("staleness:\n  maxStaleness: 1\n").unwrap_err();
    assert!(text(&e).contains("maxStaleness"), "{e}");
}

#[test]
fn quantities() {
    for (q, bytes) in [
        ("1", 1),
        ("1Ki", 1024),
        ("0.5Ki", 512),
        ("2Gi", 2 << 30),
        ("500M", 500_000_000),
        ("1.5Gi", 3 << 29),
        ("1e3", 1000),
        ("1E3", 1000),
        ("2000m", 2),
    ] {
        assert_eq!(parse_quantity(q), Ok(bytes), "{q}");
    }
    // Not whole bytes, not quantities, not above zero, too large.
    for q in [
        "1500m", "0.3", "", ".", "Mi", "1..5", "1.2.3", "-1", "1 Mi", "1MB", "1e", "1e99", "0",
        "0Gi", "99999Ei",
    ] {
        assert!(parse_quantity(q).is_err(), "{q:?}");
    }
}

#[test]
fn sections_may_be_given_in_part() {
    let c = Config::parse("watch: {bookmarkIntervalSeconds: 30}\n").unwrap();
    assert_eq!(c.watch_config().bookmark_interval, Duration::from_secs(30));
    assert_eq!(c.rv_wait(), Duration::from_secs(3));
    let c = Config::parse("upstream: {streamingList: never}\n").unwrap();
    assert_eq!(c.reflector_config().page_size, 500);
    let c = Config::parse("consistentReads: {onTimeout: error}\n").unwrap();
    assert!(c.consistent_reads().from_cache);
    assert_eq!(c.consistent_reads().wait, Duration::from_secs(3));
    let c = Config::parse("tls: {reloadIntervalSeconds: 5}\n").unwrap();
    assert!(!c.tls.enabled());
    // Bad values are still refused, naming the field.
    let e = Config::parse("watch: {bookmarkIntervalSeconds: 0}\n").unwrap_err();
    assert!(
        text(&e).starts_with("watch.bookmarkIntervalSeconds:"),
        "{e}"
    );
    let e = Config::parse("cache: {historyWindow: 1}\n").unwrap_err();
    assert!(text(&e).contains("historyWindow"), "{e}");
}

#[test]
fn defaults() {
    let c = Config::parse("{}").unwrap();
    assert_eq!(c.listen, "127.0.0.1:8080");
    assert_eq!(c.admin_listen, "127.0.0.1:8081");
    assert_eq!(c.resources.len(), 12);
}
