# The README's two commands. Everything else is plain CMake in build/.
BUILD   ?= build
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup build test demo bench image soak format clean fuzz

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

demo: build
	@bash scripts/demo.sh $(BUILD)

bench: build
	@bash scripts/bench.sh $(BUILD)

# Mixed load against 3 shards for SOAK_MINUTES (10), with SOAK_SWITCHES (1)
# table version switches spread evenly over the run (1: half-way); RSS
# (printed after each switch), errors and wrong rows checked
# (docs/reliability.md, "Soak").
soak: build
	@/usr/bin/python3 scripts/soak.py $(BUILD)

# The container image the Helm chart runs, made with buildah (no Docker
# daemon): scripts/image.sh, docs/kubernetes.md, "The image".
image: build
	@bash scripts/image.sh $(BUILD)

# libFuzzer targets of fuzz/, FUZZ_SECONDS (default 30) each, in build-fuzz/
# with clang: scripts/fuzz.sh, docs/reliability.md.
fuzz:
	@FUZZ_SECONDS=$(or $(FUZZ_SECONDS),30) bash scripts/fuzz.sh

# Rewrites every C++ file of the tree in the style of .clang-format.
format:
	@find client common proto service shard inference tools bench tests fuzz python \( -name node_modules -o -name golden \) -prune -o \( -name '*.cc' -o -name '*.h' \) -print | xargs clang-format -i

clean:
	rm -rf $(BUILD)
