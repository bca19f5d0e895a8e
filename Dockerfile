# itogate: one static binary on distroless, running as non-root.
#   make image                      # docker build, version-stamped; prints the image digest
#   docker build --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse HEAD) -t itogate:v1.2.3 .
# Both base images are pinned by digest (a tag can be moved under a build).
# To update one: `docker buildx imagetools inspect <image>:<tag>` (or
# `crane digest`) and replace the digest here, keeping the tag for readers.
# The build context is what .dockerignore lets in: the sources the binary is
# built from, never a private key (deploy/dockerignore_test.go).
FROM golang:1.26.8-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d AS build
WORKDIR /src
ENV GOTOOLCHAIN=local CGO_ENABLED=0
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
# The context has no .git (.dockerignore), so the revision is stamped too.
ARG COMMIT=
RUN go build -trimpath -buildvcs=false \
      -ldflags="-s -w -X github.com/itocompute/itogate/gatekeeper/version.Version=${VERSION} -X github.com/itocompute/itogate/gatekeeper/version.Commit=${COMMIT}" \
      -o /out/itogate ./cmd/itogate && /out/itogate version

FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
ARG VERSION=devel
ARG COMMIT=
LABEL org.opencontainers.image.title=itogate \
      org.opencontainers.image.source=https://github.com/itocompute/itogate \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${COMMIT}
COPY --from=build /out/itogate /usr/local/bin/itogate
USER 65532:65532
# 8443: the API (HTTPS with a tls section); 9443: the webhook (HTTPS).
EXPOSE 8443 9443
ENTRYPOINT ["/usr/local/bin/itogate"]
# The shipped Kubernetes install's layout: the configuration ConfigMap
# mounted as the directory /etc/itogate/config (docs/kubernetes.md).
CMD ["serve", "--config", "/etc/itogate/config/itogate.yaml"]
