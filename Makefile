# idem — `make help` lists the targets.
SHELL := bash
GO ?= go
PKGS ?= ./...
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.DEFAULT_GOAL := help

help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

services: ## Start every service the tests need (idempotent; quick when all is up).
	@bash scripts/services.sh

test: services ## Run all tests with the race detector, against real services.
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

test-short: ## Run the tests (-short) without starting services: a test whose service is down skips.
	$(GO) test -count=1 -short $(PKGS)

test-race: test ## Same as test (the race detector is always on).

lint: ## gofmt, go vet and staticcheck.
	@bad=$$(gofmt -l .); if [ -n "$$bad" ]; then echo "gofmt:"; echo "$$bad"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

bench: services ## Run every benchmark against its baseline and write docs/benchmarks.md (~7-15 min).
	bash scripts/bench.sh

bench-gateway: services ## Gateway load benchmark against a tuned ReverseProxy → docs/bench/gateway.md (~3 min).
	bash scripts/bench-gateway.sh

test-bench-module: ## Vet and test the separate benchmark module (bench/, which brings Fiber).
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./...

test-modules: ## Vet and test (-race) the separate modules other than bench/: idemfiber, and the gorilla/mux, Echo and Gin examples.
	cd idemfiber && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd examples/routers && $(GO) vet ./... && $(GO) test -race -count=1 ./...

bench-instructions: ## Instructions per request (callgrind) of idemhttp and Fiber against their bare servers → docs/bench/instructions.md (~3 min).
	bash scripts/bench-instructions.sh

bench-pgbench: services ## pgstore against pgbench running the same statements, same session.
	bash scripts/bench-pgbench.sh

chaos: services ## Chaos run, long form (IDEM_CHAOS_OPS per store, default 100000; IDEM_CHAOS_STORES, default postgres,redis); the verdict must be all zeros.
	IDEM_REQUIRE_SERVICES=1 IDEM_CHAOS_OPS=$${IDEM_CHAOS_OPS:-100000} $(GO) test -tags chaos -count=1 -v -timeout 6h -run 'TestChaos$$' ./internal/chaos/

chaos-short: services ## Chaos run for CI: 2,000 operations per store (PostgreSQL, Redis), 3 tenants, every fault class; then the planted stores (fence, scope or drain floor removed), which must fail.
	IDEM_REQUIRE_SERVICES=1 IDEM_CHAOS_OPS=$${IDEM_CHAOS_OPS:-2000} $(GO) test -tags chaos -count=1 -v -timeout 30m -run 'TestChaos' ./internal/chaos/

chaos-consumers-short: services ## Consumer chaos run for CI: 200 facts per broker (NATS JetStream, RabbitMQ, Redis Streams, SQS) and mode (transaction, engine) under every fault, and planted consumer bugs that must fail (~3 min); then the outbox source, 100 events per broker (NATS, RabbitMQ) with relays under fire, and planted relay and consumer bugs that must fail (~90 s).
	IDEM_REQUIRE_SERVICES=1 IDEM_CCHAOS_FACTS=$${IDEM_CCHAOS_FACTS:-200} $(GO) test -tags chaos -count=1 -v -timeout 15m -run 'TestConsumerChaos' ./internal/consumerchaos/
	IDEM_REQUIRE_SERVICES=1 IDEM_CCHAOS_OUTBOX_FACTS=$${IDEM_CCHAOS_OUTBOX_FACTS:-100} $(GO) test -tags chaos -count=1 -v -timeout 10m -run 'TestOutboxChaos' ./internal/consumerchaos/

chaos-consumers: services ## Consumer chaos run, long form: IDEM_CCHAOS_FACTS per broker and mode (default 5000); the verdict must be all zeros.
	IDEM_REQUIRE_SERVICES=1 IDEM_CCHAOS_FACTS=$${IDEM_CCHAOS_FACTS:-5000} $(GO) test -tags chaos -count=1 -v -timeout 3h -run 'TestConsumerChaos$$' ./internal/consumerchaos/

chaos-outbox: services ## Outbox chaos run, long form: producers → outbox → relays → broker → consumers, IDEM_CCHAOS_OUTBOX_FACTS per broker (default 3000); the verdict must be all zeros.
	IDEM_REQUIRE_SERVICES=1 IDEM_CCHAOS_OUTBOX_FACTS=$${IDEM_CCHAOS_OUTBOX_FACTS:-3000} $(GO) test -tags chaos -count=1 -v -timeout 2h -run 'TestOutboxChaos$$' ./internal/consumerchaos/

.PHONY: chaos-consumers chaos-consumers-short chaos-outbox

bench-redis: services ## redisstore against redis-benchmark, same session (prints the ratio).
	IDEM_REDIS_BENCH=1 $(GO) test -count=1 -run TestBenchVsRedisBenchmark -v ./store/redisstore/

mutation: ## Mutation testing (gremlins v0.6.0) of the engine, idemhttp, memstore, txmode, sqlitestore's known-keys table, the gateway, consumers, idemlambda, idemgrpc, the console and the SQL transaction runners; reports in tmp/mutation/ (hours on 2 busy cores; one area: MUTATION_TARGETS).
	GO=$(GO) bash scripts/mutation.sh

api: ## Rewrite the exported-API record in api/ after an intended public change (make test fails on an unrecorded one).
	$(GO) test -count=1 ./internal/apicheck -update

FUZZTIME ?= 30s
FUZZ_TARGETS := \
	./store/storekit:FuzzDecodeResponse ./store/storekit:FuzzDecodeRequest \
	./idemhttp:FuzzParseKey ./idemhttp:FuzzCanonicalJSON ./idemhttp:FuzzJSONKey \
	./gateway:FuzzParseConfig ./gateway:FuzzParseByteSize ./gateway:FuzzGatewayRequest \
	./idemclient:FuzzRetryAfter ./consumer/sqs:FuzzUnwrapSNS \
	./store/sqlitestore:FuzzStoredRecord ./store/redisstore:FuzzDecodeRecord ./store/dynamostore:FuzzDecodeItem \
	./idemlambda:FuzzKeyPath ./idemlambda:FuzzKeyEncoding \
	.:FuzzScopedKey

fuzz: ## Fuzz every parser of outside input for FUZZTIME each (default 30s).
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; echo "== $$pkg $$fn"; \
		$(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

demo: ## Run the demo: a payments API behind the idem gateway.
	$(GO) run ./cmd/idem demo

.PHONY: help services test test-short test-race lint bench bench-gateway bench-instructions test-bench-module bench-pgbench bench-redis chaos chaos-short mutation fuzz demo api test-modules

image: ## Container image localhost/idem:latest from Containerfile with podman (installs Debian's podman and runc if missing; nothing pulled).
	bash scripts/image.sh

image-test: ## Build the image and run it as an operator would: PostgreSQL, an upstream, the curl pair, /readyz, SIGTERM drain, non-root user.
	bash scripts/image-test.sh

dist: ## Release archives in dist/: linux, darwin, windows × amd64, arm64, version and commit stamped, SHA256SUMS, a CycloneDX SBOM per archive.
	bash scripts/dist.sh

dist-test: ## Build the release archives twice from clean clones of HEAD and check they are identical, complete and stamped.
	bash scripts/dist-test.sh

.PHONY: image image-test dist dist-test

DEPLOY_TEST = cd deploy/tools && PATH="$(CURDIR)/.tools/bin:$$PATH" $(GO) test -count=1 -timeout 20m

deploy-tools: ## Install promtool (into .tools/bin) and systemd-analyze if missing, for the deployment tests.
	@bash scripts/deploy-tools.sh

chart-test: deploy-tools ## Helm chart: helm lint, helm template of each variant, manifests checked against the Kubernetes schemas, its config loaded by the gateway, docs/deploy.md's blocks.
	$(DEPLOY_TEST) -run 'Chart|Schema|DeployDoc' ./...

rules-test: deploy-tools ## Alert rules: promtool check and test rules, metric names against a gateway's /metrics, runbook links.
	PATH="$(CURDIR)/.tools/bin:$$PATH" promtool test rules deploy/prometheus/idem-alerts_test.yaml
	$(DEPLOY_TEST) -run 'Alert' ./...

unit-test: deploy-tools ## systemd unit: hardening, stop timeout above the drain, systemd-analyze verify.
	$(DEPLOY_TEST) -run 'Systemd' ./...

deploy-test: deploy-tools ## All of chart-test, rules-test and unit-test, and go vet of their module (slow: vets Helm and client-go too).
	cd deploy/tools && $(GO) vet ./...
	$(DEPLOY_TEST) ./...

.PHONY: deploy-tools chart-test rules-test unit-test deploy-test
