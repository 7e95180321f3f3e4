# inboxd — see README.md and docs/.
SHELL := /bin/bash
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X github.com/inboxd/inboxd/cmd/inboxd/app.Version=$(VERSION)
IMAGE       ?= ghcr.io/inboxd/inboxd:0.3.0
# The repository's modules: the main one (what an embedder requires) and the
# ones kept out of an embedder's module graph: the deploy checks (k8s.io,
# prometheus/prometheus), the fault suite and the benchmarks (gonum). Each
# nested go.mod replaces github.com/inboxd/inboxd by the repository root.
MODULES     := . deploy internal/faultsuite cmd/inboxd-bench
# Tests and benchmarks use this server; each test creates its own database.
export INBOXD_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable

.PHONY: all build test lint docs screenshots linkcheck bench bench-long bench-go demo clean image alerts fuzz-short fault fault-long

all: lint test build

## build: compile bin/inboxd
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/inboxd ./cmd/inboxd

## test: every test of every module, with the race detector, against the local PostgreSQL
## (the fault suite's scenarios are skipped without INBOXD_FAULT=1, its other tests run;
## needs promtool for the alert rule tests: deploy/prometheus/install-promtool.sh)
test:
	@failed=; for m in $(MODULES); do \
	  echo "== go test $$m"; \
	  (cd $$m && $(GO) test -race -count=1 -timeout 12m ./...) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: tests failed in:$$failed" >&2; exit 1; fi

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

## docs: rewrite what the code writes in docs/: the variable table of docs/configuration.md
docs:
	$(GO) test -count=1 -timeout 60s -run '^TestConfigurationPageIsWrittenByTheCode$$' ./config/ -update

## screenshots: rewrite docs/images/console-*.png, the console's main pages in chromium (TestScreenshots)
screenshots:
	INBOXD_SCREENSHOTS=$(CURDIR)/docs/images $(GO) test -count=1 -timeout 5m -run '^TestScreenshots$$' ./internal/console/

## alerts: promtool check and unit tests of the alert rules
alerts:
	bash deploy/prometheus/check.sh

## fuzz-short: every fuzz target for 50,000 inputs, about 10 s each (CI runs it; the corpora run in `make test`).
## A count, not a duration: with -fuzztime=10s, go1.26's fuzz coordinator may fail a target with a bare
## "context deadline exceeded" at the deadline (golang/go#75804, fixed in Go 1.27)
fuzz-short:
	$(GO) test -run='^$$' -fuzz='^FuzzRedactURL$$' -fuzztime=50000x ./config/
	$(GO) test -run='^$$' -fuzz='^FuzzConfigLoad$$' -fuzztime=50000x ./config/
	$(GO) test -run='^$$' -fuzz='^FuzzMapMessage$$' -fuzztime=50000x ./ingest/
	$(GO) test -run='^$$' -fuzz='^FuzzEncodeHeaders$$' -fuzztime=50000x ./ingest/
	$(GO) test -run='^$$' -fuzz='^FuzzWebhookVerify$$' -fuzztime=50000x ./ingest/
	$(GO) test -run='^$$' -fuzz='^FuzzWebhookExtract$$' -fuzztime=50000x ./ingest/
	$(GO) test -run='^$$' -fuzz='^FuzzParseRoutes$$' -fuzztime=50000x ./handlers/
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

## bench-go: the go test benchmarks (yardstick, pool, ordering, ingest, end to end) once each
bench-go:
	$(GO) test -run '^$$' -bench 'RawPipeline|Pool|Keyed|Ingest|EndToEnd' -benchtime 1x -count 1 -timeout 20m ./...

## demo: embedded Kafka-protocol broker + local PostgreSQL + HTTP sink, a few thousand events;
## SOURCE=rabbitmq or SOURCE=nats: the same through a queue / stream of its own on the local server
SOURCE      ?= kafka
demo:
	$(GO) run ./cmd/inboxd-demo --source $(SOURCE)

## image: build the container image (needs a Docker engine; not run here)
image:
	docker build -f deploy/Dockerfile -t $(IMAGE) .

clean:
	rm -rf bin
