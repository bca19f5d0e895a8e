# itogate: one static binary on distroless, running as non-root.
#   docker build -t itogate .
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/itogate ./cmd/itogate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/itogate /usr/local/bin/itogate
USER 65532:65532
EXPOSE 8443 9443
ENTRYPOINT ["/usr/local/bin/itogate"]
CMD ["serve", "--config", "/etc/itogate/itogate.yaml"]
