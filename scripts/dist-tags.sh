#!/usr/bin/env bash
# Prints the -tags value of a release build of idem (make dist, make image):
#
#   grpcnotrace  gRPC (linked for the OTLP exporters' configuration) without its
#                golang.org/x/net/trace, which brings the standard html/template and
#                text/template; any template package that looks methods up by name makes
#                the linker keep every exported method of every type, about 11 MB.
#
# A build without it (go install) works the same and is larger.
#
#   go build -trimpath -tags "$(scripts/dist-tags.sh)" -ldflags "$(scripts/dist-ldflags.sh)" ./cmd/idem
echo grpcnotrace
