# oncegate: a static binary on a minimal base, as a non-root user.
#   docker build -t oncegate --build-arg VERSION=$(git describe --tags --always) .
#   docker run -p 8080:8080 -v oncegate-data:/var/lib/oncegate \
#     -v $PWD/oncegate.yaml:/etc/oncegate/oncegate.yaml:ro -e ONCEGATE_KEY_ACME=… oncegate
# The configuration is mounted at /etc/oncegate/oncegate.yaml; its secrets
# come from the environment variables it names. The default store is a
# SQLite file on the /var/lib/oncegate volume; for replicas pass
# --store postgres://… --coordination redis://… (see compose.yaml).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
# No failpoints tag: the crash tests' hook is not in this binary.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/oncegate ./cmd/oncegate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/oncegate /usr/local/bin/oncegate
USER nonroot:nonroot
VOLUME ["/var/lib/oncegate"]
EXPOSE 8080 9464
ENTRYPOINT ["/usr/local/bin/oncegate"]
CMD ["serve", "--config", "/etc/oncegate/oncegate.yaml", "--listen", "0.0.0.0:8080", "--store", "sqlite:///var/lib/oncegate/oncegate.db"]
