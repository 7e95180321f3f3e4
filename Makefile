# inboxd — see README.md and docs/.
SHELL := /bin/bash
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The version is the one line of VERSION (the one place it is written); the
# commit and its time come from git, the time (not the clock's) so that two
# builds of one commit are identical. `inboxd version` prints all three.
VERSION     := $(shell cat VERSION)
COMMIT      := $(shell git rev-parse HEAD 2>/dev/null)$(shell git status --porcelain 2>/dev/null | grep -q . && echo -dirty)
DATE        := $(shell TZ=UTC0 git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null)
VERSION_PKG := github.com/inboxd/inboxd/cmd/inboxd/app
LDFLAGS     := -s -w -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT) -X $(VERSION_PKG).Date=$(DATE)
IMAGE       ?= ghcr.io/inboxd/inboxd:$(VERSION)
# The repository's modules: the main one (what an embedder requires) and the
# ones kept out of an embedder's module graph: the deploy checks (k8s.io,
# prometheus/prometheus), the fault suite and the benchmarks (gonum). Each
# nested go.mod replaces github.com/inboxd/inboxd by the repository root.
MODULES     := . deploy internal/faultsuite cmd/inboxd-bench
# Tests and benchmarks use this server; each test creates its own database.
export INBOXD_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable

.PHONY: all build print-ldflags test test-partitioned model lint docs screenshots linkcheck bench bench-long bench-month bench-dedup bench-history bench-go demo clean image image-check docker-image release-check alerts fuzz-short fault fault-long

all: lint test build

## build: compile bin/inboxd (static: CGO_ENABLED=0), stamped with VERSION, the commit and its time
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/inboxd ./cmd/inboxd

## print-ldflags: the -ldflags make build stamps the binary with (TestVersionOfMakeBuild reads them)
print-ldflags:
	@echo '$(LDFLAGS)'

## test: every test of every module, with the race detector, against the local PostgreSQL,
## then the models (make model; the loop leaves their run to it)
## (the fault suite's scenarios are skipped without INBOXD_FAULT=1, its other tests run;
## needs promtool for the alert rule tests: deploy/prometheus/install-promtool.sh)
test:
	@failed=; for m in $(MODULES); do \
	  echo "== go test $$m"; \
	  (cd $$m && $(GO) test -race -count=1 -timeout 12m -skip '^TestModels$$' ./...) || failed="$$failed $$m"; \
	done; \
	echo "== make model"; $(MAKE) --no-print-directory model || failed="$$failed model"; \
	echo "== make test-partitioned"; $(MAKE) --no-print-directory test-partitioned || failed="$$failed test-partitioned"; \
	if [ -n "$$failed" ]; then echo "make test: tests failed in:$$failed" >&2; exit 1; fi

## test-partitioned: the driver's, ingest's and the outbox's tests again on partitioned tables
## (INBOXD_TEST_PARTITIONED=true: pgtest converts every test database, docs/inbox-table.md)
test-partitioned:
	INBOXD_TEST_PARTITIONED=true $(GO) test -race -count=1 -timeout 12m ./internal/driver/ ./ingest/... ./internal/outbox/ ./internal/partitions/

## model: the protocols' Promela models (internal/model) checked exhaustively by SPIN, each mutation
## caught by the property it breaks, each named statement and function still there (needs spin and gcc)
model:
	$(GO) test -count=1 -timeout 10m ./internal/model/

## lint: go vet, staticcheck, the documentation's links, and the systemd unit's verification and security score
lint: linkcheck
	@set -e; for m in $(MODULES); do \
	  echo "== go vet, staticcheck $$m"; \
	  (cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...); \
	done
	bash deploy/systemd/check.sh

## linkcheck: every relative link and #anchor in README.md and docs/ resolves (also part of `make test`)
linkcheck:
	$(GO) test -count=1 -timeout 60s -run '^(TestRelativeLinksResolve|TestREADMELinksIntoDocs)$$' ./internal/doccheck/

## docs: rewrite what the code writes in docs/: the variable table of docs/configuration.md,
## and what SPIN explored of the models in docs/guarantees.md (needs spin and gcc)
docs:
	$(GO) test -count=1 -timeout 60s -run '^TestConfigurationPageIsWrittenByTheCode$$' ./internal/vardocs/ -update
	$(GO) test -count=1 -timeout 10m -run '^TestModels$$' ./internal/model/ -update

## screenshots: rewrite docs/images/console-*.png: the console end to end in chromium, every role (TestConsoleEndToEnd)
screenshots:
	INBOXD_SCREENSHOTS=$(CURDIR)/docs/images $(GO) test -count=1 -timeout 5m -run '^TestConsoleEndToEnd$$' ./cmd/inboxd/app/

## alerts: promtool check and unit tests of the alert rules
alerts:
	bash deploy/prometheus/check.sh

## fuzz-short: every fuzz target for 50,000 inputs, about 10 s each (CI runs it; the corpora run in `make test`).
## A count, not a duration: with -fuzztime=10s, go1.26's fuzz coordinator may fail a target with a bare
## "context deadline exceeded" at the deadline (golang/go#75804, fixed in Go 1.27)
fuzz-short:
	$(GO) test -run='^$$' -fuzz='^FuzzRedactURL$$' -fuzztime=50000x ./config/
	$(GO) test -run='^$$' -fuzz='^FuzzConfigLoad$$' -fuzztime=50000x ./config/
	$(GO) test -run='^$$' -fuzz='^FuzzMapMessage$$' -fuzztime=50000x ./ingest/kafka/
	$(GO) test -run='^$$' -fuzz='^FuzzEncodeHeaders$$' -fuzztime=50000x ./ingest/kafka/
	$(GO) test -run='^$$' -fuzz='^FuzzWebhookVerify$$' -fuzztime=50000x ./ingest/webhook/
	$(GO) test -run='^$$' -fuzz='^FuzzWebhookExtract$$' -fuzztime=50000x ./ingest/webhook/
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=50000x ./internal/opfiles/routesfile/
	$(GO) test -run='^$$' -fuzz='^FuzzIdempotencyKey$$' -fuzztime=50000x ./handlers/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeHeaders$$' -fuzztime=50000x ./internal/engine/

## fault: the fault-injection suite, short variant (CI runs it): real binaries, PostgreSQL restarts,
## connection cuts and latency, SIGKILL/SIGSTOP, slow handlers, big payloads; invariants on the history
fault:
	cd internal/faultsuite && INBOXD_FAULT=1 $(GO) test -count=1 -parallel 16 -timeout 10m -v -run . . 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|faultsuite:|\s+[a-z_]+\.go:[0-9]+:)' ; exit $${PIPESTATUS[0]}

## fault-long: the same scenarios at full size (minutes; not in CI)
fault-long:
	cd internal/faultsuite && INBOXD_FAULT_LONG=1 $(GO) test -count=1 -parallel 16 -timeout 60m -v -run . .

## bench: inboxd beside River and the raw-SQL yardstick (throughput, latency over load, peak RSS), and from the local
## RabbitMQ and NATS JetStream beside Kafka (each against the broker's own publish rate), the outbox relay beside a raw
## Kafka producer (alone: cd cmd/inboxd-bench && go run . -run outbox -out ../../docs/bench/outbox); writes docs/bench/ (a few minutes)
bench:
	cd cmd/inboxd-bench && $(GO) run . -out $(CURDIR)/docs/bench

## bench-long: 5 min at 0.8x the end-to-end maximum with retention (5s) and without; per-minute rate, p99, inbox size (~15 min; not in CI)
## -vacuum-every 30s stands in for autovacuum where the server has it off
bench-long:
	cd cmd/inboxd-bench && $(GO) run . -run long -vacuum-every 30s -out $(CURDIR)/docs/bench

## bench-month: the month run (-run month): two PostgreSQL clusters of its own (initdb, pg_ctl, autovacuum on),
## DELETE retention and partition retention side by side for 30 min at 80% of their maximum; docs/bench/month.* (~35 min; not in CI)
bench-month:
	cd cmd/inboxd-bench && $(GO) run . -run month -out $(CURDIR)/docs/bench

## bench-dedup: the cost per insert of exact deduplication across partitions against one unique index (-run dedup; a few minutes)
bench-dedup:
	cd cmd/inboxd-bench && $(GO) run . -run dedup -out $(CURDIR)/docs/bench

## bench-history: what the rows' attempt histories cost (-run history): the pool with them and without, paired,
## on the happy path and at 10% failing; the claim with its history part and without; docs/bench/history/ (~8 min)
bench-history:
	cd cmd/inboxd-bench && $(GO) run . -run history -out $(CURDIR)/docs/bench

## bench-go: the go test benchmarks (yardstick, pool, ordering, ingest, end to end) once each
bench-go:
	$(GO) test -run '^$$' -bench 'RawPipeline|Pool|Keyed|Ingest|EndToEnd' -benchtime 1x -count 1 -timeout 20m ./...

## demo: embedded Kafka-protocol broker + local PostgreSQL + HTTP sink, a few thousand events, a summary; builds
## bin/inboxd first and prints the INBOXD_DATABASE_URL to look at the demo's database with it. The demo database
## (inboxd_demo) is created marked as the demo's, and only a database so marked is dropped by the next run.
## SOURCE=rabbitmq or SOURCE=nats: the same through a queue / stream of its own on the local server;
## KEEP=1: the daemon keeps running with its console open (the URL and token are printed) until Ctrl-C
SOURCE      ?= kafka
demo: build
	$(GO) run ./cmd/inboxd-demo --source $(SOURCE) $(if $(KEEP),--keep)

## image: the container image, built in Go without a Docker engine (deploy/image: no base to download, a static
## binary, the machine's CA certificates, the nonroot user 65532, no shell), for PLATFORMS, reproducibly (files and
## creation at the commit's time): an OCI layout in bin/image/oci (push it: crane push bin/image/oci $(IMAGE)) and
## the build machine's platform as bin/image/inboxd-$(VERSION).tar (docker load -i …)
PLATFORMS   ?= linux/amd64 linux/arm64
image:
	@set -e; args=; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; out=bin/inboxd-$$os-$$arch; \
	  echo "== go build $$out"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$out ./cmd/inboxd; \
	  args="$$args $$p=$(CURDIR)/$$out"; \
	done; \
	cd deploy && $(GO) run ./image build -version '$(VERSION)' -commit '$(COMMIT)' -date '$(DATE)' \
	  -out $(CURDIR)/bin/image/oci -tar $(CURDIR)/bin/image/inboxd-$(VERSION).tar $$args

## image-check: make image, then the same build again (the two indexes must be one digest), then the checks of every
## platform's config (user 65532, entrypoint, labels with VERSION, port) and filesystem (no shell, the binary, the CA
## certificates), and `inboxd version` run from the unpacked filesystem (chrooted as 65532 when root); prints the sizes.
## Not part of make test (it compiles the daemon for every platform)
image-check: image
	@set -e; args=; for p in $(PLATFORMS); do args="$$args $$p=$(CURDIR)/bin/inboxd-$${p%/*}-$${p#*/}"; done; \
	cd deploy && $(GO) run ./image build -version '$(VERSION)' -commit '$(COMMIT)' -date '$(DATE)' -out $(CURDIR)/bin/image/again $$args >/dev/null && \
	$(GO) run ./image check -version '$(VERSION)' -same $(CURDIR)/bin/image/again $(CURDIR)/bin/image/oci

## docker-image: the image from deploy/Dockerfile (needs a Docker engine; the same contents as make image, on distroless)
docker-image:
	docker build -f deploy/Dockerfile --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .

## release-check: goreleaser (from the Go module proxy) checks .goreleaser.yaml, then builds a snapshot of every
## release binary (linux and darwin, amd64 and arm64), its archives and checksums into dist/; the checksums are
## verified and the build machine's binary must print VERSION. Not part of make test (minutes: goreleaser compiles)
GORELEASER  ?= github.com/goreleaser/goreleaser/v2@v2.15.1
release-check:
	$(GO) run $(GORELEASER) check
	INBOXD_VERSION=$(VERSION) INBOXD_COMMIT=$(COMMIT) INBOXD_DATE=$(DATE) $(GO) run $(GORELEASER) release --snapshot --clean
	cd dist && sha256sum -c inboxd_*_checksums.txt
	@bin=$$(ls dist/inboxd_$$($(GO) env GOOS)_$$($(GO) env GOARCH)*/inboxd); echo "$$bin version: $$($$bin version)"; \
	$$bin version | grep -q '^inboxd $(VERSION)-snapshot' || { echo "release-check: $$bin does not print VERSION $(VERSION)" >&2; exit 1; }

clean:
	rm -rf bin
