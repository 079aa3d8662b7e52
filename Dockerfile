# kvix in a container, from Debian's packages only (apt), as on a fresh Debian
# machine: .ci/deps installs what kvix needs (the same list `make check` and
# `make demo` install), then kvix is built and installed, and the container
# runs the main job on the bundled example.
#
#   docker build -t kvix .
#   docker run --rm kvix                           # make demo
#   docker run --rm -p 8090:8090 kvix kvindex --port 8090 --block-size 16 \
#       --workers 1=tcp://gpu1:5557                # Dynamo's indexer's flags
#
# The release must be the one .ci/deps is tested on (tests/cli/dockerfile.t).
FROM debian:bookworm

ENV DEBIAN_FRONTEND=noninteractive
# the package list first, so that a change of the sources reuses this layer
COPY .ci/deps /tmp/kvix-deps
RUN sh /tmp/kvix-deps && rm -rf /var/lib/apt/lists/* /tmp/kvix-deps

WORKDIR /src/kvix
COPY . .
RUN make -j"$(nproc)" && make install PREFIX=/usr && ldconfig

EXPOSE 8090
CMD ["make", "demo"]
