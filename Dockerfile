# syntax=docker/dockerfile:1
# Build: a static binary, no cgo.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/gateway ./cmd/gateway \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/enginesim ./cmd/enginesim

# Run: nothing but the binaries, as an unprivileged user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /out/enginesim /usr/local/bin/
USER nonroot:nonroot
# In a container the gateway must listen beyond loopback; the config file or
# KVGATE_LISTEN may still override this.
ENV KVGATE_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["--config", "/etc/kvgate/kvgate.yaml"]
