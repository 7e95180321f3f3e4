# inboxd — see README.md.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X github.com/inboxd/inboxd/cmd/inboxd/app.Version=$(VERSION)
# Tests and benchmarks use this server; each test creates its own database.
export INBOXD_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable

.PHONY: all build test lint bench demo clean

all: lint test build

## build: compile bin/inboxd
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/inboxd ./cmd/inboxd

## test: every test, with the race detector, against the local PostgreSQL
test:
	$(GO) test -race -count=1 -timeout 8m ./...

## lint: go vet and staticcheck
lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## bench: end-to-end and pipeline benchmarks (see README "Performance")
bench:
	$(GO) test -run '^$$' -bench 'RawPipeline|Pool|Ingest|EndToEnd' -benchtime 1x -count 1 -timeout 20m ./...

## demo: embedded Kafka-protocol broker + local PostgreSQL + HTTP sink, a few thousand events
demo:
	$(GO) run ./cmd/inboxd-demo

clean:
	rm -rf bin
