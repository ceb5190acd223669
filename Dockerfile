# oncegate: a static binary on a minimal base, as a non-root user.
#   docker build -t oncegate --build-arg VERSION=$(git describe --tags --always) .
#   docker run -p 8080:8080 -v oncegate-data:/var/lib/oncegate \
#     -v $PWD/oncegate.yaml:/etc/oncegate/oncegate.yaml:ro -e ONCEGATE_KEY_ACME=… oncegate
# The configuration is mounted at /etc/oncegate/oncegate.yaml; its secrets
# come from the environment variables, or the files (mount them, e.g. at
# /run/secrets/…), it names. The default store is a SQLite file on the
# /var/lib/oncegate volume, owned by the image's non-root user; for replicas
# pass --store postgres://… --coordination redis://… (see compose.yaml).
# Metrics on their own port: add --metrics-listen 0.0.0.0:9464 (no key
# there: publish it only to your Prometheus).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
# No failpoints tag: the crash tests' hook is not in this binary.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/oncegate ./cmd/oncegate
# The store's directory, created here: the base image has no shell to do it.
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/oncegate /usr/local/bin/oncegate
# Owned by nonroot (65532), so a fresh volume mounted here is writable: Docker
# copies the directory's owner and mode into a new named volume.
COPY --from=build --chown=65532:65532 /out/data /var/lib/oncegate
USER nonroot:nonroot
VOLUME ["/var/lib/oncegate"]
EXPOSE 8080 9464
# Liveness through the binary itself (no shell, no curl in the image).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["/usr/local/bin/oncegate", "health", "--url", "http://127.0.0.1:8080"]
ENTRYPOINT ["/usr/local/bin/oncegate"]
CMD ["serve", "--config", "/etc/oncegate/oncegate.yaml", "--listen", "0.0.0.0:8080", "--store", "sqlite:///var/lib/oncegate/oncegate.db"]
