# The redlock-proxy image: the static binary and its health-check probe,
# nothing else (no shell, no libc), run as a non-root user. The binaries
# are built first and the image from them, as release tools do:
#
#   packaging/build.sh redlock-proxy:1.0     # docker; ENGINE=podman for podman
#
# which runs, in effect,
#
#   CGO_ENABLED=0 go build -trimpath -o dist/redlock-proxy .
#   CGO_ENABLED=0 go build -trimpath -o dist/probe ./cmd/probe
#   docker build -f Dockerfile -t redlock-proxy:1.0 dist
#
# Run it with the masters' addresses; flags after the image name replace
# the default command below, so give -listen and -admin too:
#
#   docker run -p 7379:7379 -p 7380:7380 redlock-proxy:1.0 \
#     -listen 0.0.0.0:7379 -admin 0.0.0.0:7380 -backends 10.0.0.11:6379,10.0.0.12:6379,10.0.0.13:6379
#
# The image holds no CA certificates: with backend_tls, give
# backend_tls_ca_file (mounted into the container).
FROM scratch
COPY redlock-proxy probe /
USER 65532:65532
EXPOSE 7379 7380
ENTRYPOINT ["/redlock-proxy"]
CMD ["-listen", "0.0.0.0:7379", "-admin", "0.0.0.0:7380"]
