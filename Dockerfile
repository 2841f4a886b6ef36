# The engram-store image: engram-shard (the entrypoint) and engramctl, as the
# Helm chart (helm/engram-store) runs them. The same image, without Docker,
# comes from `make image` (scripts/image.sh, buildah); docs/kubernetes.md, "The image".
#
#   docker build -t engram-store:0.1.0 .
#
# Stage 1 builds on Debian bookworm with exactly the packages
# scripts/setup.sh installs for development; stage 2 is a slim bookworm with
# only the shared libraries the two binaries load (found with ldd and dpkg
# in stage 1), CA certificates, and the user engram (10001:10001).

FROM debian:bookworm AS build
COPY scripts/setup.sh /src/scripts/setup.sh
RUN bash /src/scripts/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
 && cmake --build /build -j"$(nproc)" --target engram-shard engramctl \
 && strip --strip-debug /build/bin/engram-shard /build/bin/engramctl
# The Debian packages of the libraries the binaries load (merged /usr: dpkg
# knows a path by one of its two spellings).
RUN for b in /build/bin/engram-shard /build/bin/engramctl; do \
      ldd "$b" | awk '$3 ~ /^\// { print $3 }'; \
    done | sort -u | while read -r f; do \
      r="$(readlink -f "$f")"; \
      dpkg -S "$f" "/usr$f" "$r" "/usr$r" 2>/dev/null | head -1 | cut -d: -f1; \
    done | sort -u > /build/runtime-packages \
 && test -s /build/runtime-packages

FROM debian:bookworm-slim
COPY --from=build /build/runtime-packages /tmp/runtime-packages
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates $(cat /tmp/runtime-packages) \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages \
 && groupadd --gid 10001 engram \
 && useradd --uid 10001 --gid 10001 --home-dir /data --shell /usr/sbin/nologin engram \
 && install -d -o 10001 -g 10001 /data
COPY --from=build /build/bin/engram-shard /build/bin/engramctl /usr/local/bin/
USER 10001:10001
WORKDIR /data
# gRPC, the row stream, Prometheus /metrics: the chart's ports.
EXPOSE 7070/tcp 7071/tcp 9090/tcp
ENTRYPOINT ["/usr/local/bin/engram-shard"]
# Serves a shard imported to /data/shard (docker run -v SHARD:/data); the
# chart gives its own arguments.
CMD ["--db", "/data/shard", "--listen=0.0.0.0:7070", "--stream-port=7071", "--metrics-port=9090"]
