# outboxd container image: a static binary on distroless, running as an
# unprivileged user.
#
#   docker build -t outboxd .
#   docker run --rm -e OUTBOX_DSN=postgres://... outboxd migrate
#   docker run --rm -e OUTBOX_DSN=postgres://... -p 9090:9090 outboxd run --sink https://... --metrics-addr :9090
#
# The build stage runs `make build`, the same static build (CGO_ENABLED=0)
# as on a workstation, so the image holds exactly that binary.

# The Go version is the go directive of go.mod.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make build VERSION=${VERSION}

# static-debian12 has CA certificates (for https, amqps, nats+tls ...) and
# time zone data, and no shell or libc: the binary needs neither.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/outboxd /usr/local/bin/outboxd
# The "nonroot" user of the distroless images, numeric so that Kubernetes'
# runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/outboxd"]
CMD ["run"]
