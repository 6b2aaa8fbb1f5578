# kcache container image: docker build -t kcache:0.1.0 .
#
# Build stage: the official Rust image (Debian bookworm), the README's build command plus
# --locked (use exactly the versions in Cargo.lock).
FROM rust:1-bookworm AS build
WORKDIR /src

# Dependencies first, against placeholder sources, so that a change to kcache's own code does
# not rebuild every crate: this layer is reused as long as the manifests and Cargo.lock are
# unchanged. Every workspace member's manifest must be there for cargo to load the workspace,
# though the image builds only the binary and the proxy library.
COPY Cargo.toml Cargo.lock ./
COPY crates/kcache/Cargo.toml crates/kcache/
COPY crates/kcache-json/Cargo.toml crates/kcache-json/
COPY crates/kcache-selector/Cargo.toml crates/kcache-selector/
COPY crates/kcache-table/Cargo.toml crates/kcache-table/
COPY crates/kcache-protobuf/Cargo.toml crates/kcache-protobuf/
COPY crates/kcache-heap/Cargo.toml crates/kcache-heap/
COPY crates/kcache-http1/Cargo.toml crates/kcache-http1/
COPY crates/kcache-sim/Cargo.toml crates/kcache-sim/
COPY crates/kcache-bench/Cargo.toml crates/kcache-bench/
COPY crates/kcache-audit/Cargo.toml crates/kcache-audit/
RUN mkdir -p src crates/kcache/src crates/kcache-json/src crates/kcache-selector/src crates/kcache-table/src crates/kcache-protobuf/src \
        crates/kcache-heap/src crates/kcache-http1/src crates/kcache-sim/src \
        crates/kcache-bench/src crates/kcache-audit/src \
    && echo 'fn main() {}' > src/main.rs \
    && touch crates/kcache/src/lib.rs crates/kcache-json/src/lib.rs crates/kcache-selector/src/lib.rs crates/kcache-table/src/lib.rs \
        crates/kcache-protobuf/src/lib.rs \
        crates/kcache-heap/src/lib.rs crates/kcache-http1/src/lib.rs \
        crates/kcache-sim/src/lib.rs crates/kcache-bench/src/lib.rs crates/kcache-audit/src/lib.rs \
    && cargo build --release --locked --no-default-features -p kcache-cli \
    && rm -rf src crates

# The real sources. `-p kcache-cli --no-default-features`: only the binary and the proxy
# library are built (a plain `cargo build` would build every workspace member), and the binary
# has no simulated apiserver (`kcache demo`) and no benchmark, only `serve` and `config check`;
# the sim's recordings (tests/fixtures) are therefore not needed. The sources' modification
# times may be older than the placeholders', so drop kcache's own build results to make cargo
# rebuild them.
COPY src ./src
COPY crates ./crates
RUN rm -rf target/release/.fingerprint/kcache* target/release/deps/kcache* \
        target/release/deps/libkcache* target/release/kcache \
    && cargo build --release --locked --no-default-features -p kcache-cli

# Runtime stage: glibc and libgcc only, no shell, runs as uid/gid 65532 ("nonroot").
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kcache /kcache
# The documented example configuration; deployments mount their own at the same path.
COPY config/kcache.yaml /etc/kcache/kcache.yaml
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 65532:65532
# The configuration above serves the API on 127.0.0.1:8080 and kcache's own /livez, /readyz,
# /healthz and /metrics on 127.0.0.1:8081 (plain HTTP, no credentials, no object data), both
# reachable only inside the container. Publish them with --listen 0.0.0.0:8080 (with --auth
# delegated or trust-local: kcache refuses a network address without authentication) and
# --admin-listen 0.0.0.0:8081. Health is checked by Kubernetes probes on the admin port, not here.
EXPOSE 8080 8081
ENTRYPOINT ["/kcache"]
CMD ["serve", "--config", "/etc/kcache/kcache.yaml"]
