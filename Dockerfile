# The `tessera` binary in a small image (docs/deploy.md). No registry is reachable from CI, so
# CI never builds this image: crates/host/tests/deploy_manifests.rs checks what it assumes
# (the node running as this non-root user, its data on an empty mounted volume, these ports
# and variables).
#
#   docker build -t tessera:0.1.0 .
#   docker run -e TESSERA_ADMIN_TOKEN=... -p 7070:7070 -v tessera-data:/var/lib/tessera tessera:0.1.0

FROM rust:1.95-bookworm AS build
RUN rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
RUN cargo build --release --bin tessera

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 tessera \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/tessera \
        --shell /usr/sbin/nologin tessera \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/tessera
COPY --from=build /src/target/release/tessera /usr/local/bin/tessera
USER 10001:10001
ENV TESSERA_DATA_DIR=/var/lib/tessera \
    TESSERA_HTTP=0.0.0.0:7070
VOLUME ["/var/lib/tessera"]
# 7070: the HTTP API; 7171: traffic between the nodes of a cluster (mutual TLS).
EXPOSE 7070 7171
ENTRYPOINT ["/usr/local/bin/tessera"]
CMD ["node"]
