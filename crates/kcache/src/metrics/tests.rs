use super::*;

#[test]
fn negotiation() {
    use Format::*;
    for (accept, want) in [
        (None, Prometheus),
        (Some("*/*"), Prometheus),
        (Some("text/plain"), Prometheus),
        (
            Some("application/openmetrics-text; version=1.0.0"),
            OpenMetrics,
        ),
        // What Prometheus sends by default.
        (
            Some(
                "application/openmetrics-text;version=1.0.0;q=0.5,\
                     application/openmetrics-text;version=0.0.1;q=0.4,\
                     text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
            ),
            OpenMetrics,
        ),
        (
            Some("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"),
            Prometheus,
        ),
        (Some("application/openmetrics-text;q=0"), Prometheus),
    ] {
        assert_eq!(Format::negotiate(accept), want, "{accept:?}");
    }
}

#[test]
fn text_format_names_counters_and_info_as_the_text_parser_expects() {
    let om = "# HELP kcache_requests Requests.\n# TYPE kcache_requests counter\n\
                  kcache_requests_total{verb=\"get\"} 3\n\
                  # HELP kcache_build kcache build information.\n# TYPE kcache_build info\n\
                  kcache_build_info{version=\"0.1.0\"} 1\n\
                  # HELP kcache_watchers Open watches.\n# TYPE kcache_watchers gauge\n\
                  kcache_watchers 2\n# EOF\n";
    assert_eq!(
        to_prometheus_text(om),
        "# HELP kcache_requests_total Requests.\n# TYPE kcache_requests_total counter\n\
             kcache_requests_total{verb=\"get\"} 3\n\
             # HELP kcache_build_info kcache build information.\n# TYPE kcache_build_info gauge\n\
             kcache_build_info{version=\"0.1.0\"} 1\n\
             # HELP kcache_watchers Open watches.\n# TYPE kcache_watchers gauge\n\
             kcache_watchers 2\n"
    );
}
