# The two commands a fresh Debian machine needs: `make run` and `make test`.
BUILD ?= build
STUDY ?= configs/studies/default.json
JOBS ?= $(shell nproc)

.PHONY: setup setup-test build run test test-long bench sanitize clean

setup:
	@bash scripts/setup.sh

setup-test:
	@bash scripts/setup.sh test

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@$(BUILD)/cli/tpusim run $(STUDY) --out out

# `make test`: every test but the slowest cross-checks (label "long"), which `make test-long`
# runs; .ci/run runs both.
test: setup-test build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE long

test-long: setup-test build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L long

# The whole suite under AddressSanitizer and UndefinedBehaviorSanitizer, in its own build tree.
sanitize: setup-test
	@cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPUSIM_SANITIZE=ON >/dev/null
	@cmake --build build-sanitize -j $(JOBS)
	@cd build-sanitize && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j $(JOBS) --timeout 1800

bench: build
	@bash scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-sanitize out
