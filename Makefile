# attnd - one plain Makefile.
#
#   make                 build build/attnd
#   make run             install missing Debian packages, build, run on :8000
#   make test            install missing Debian packages, unit tests (check) +
#                        integration tests (real attnd)
#   make valgrind        the unit and integration tests under valgrind
#   make deps            install (as root) or list the Debian packages needed
#   make venv            .venv: a Python virtual environment that sees Debian's
#                        numpy, with the attnd_client package installed
#   make install         binary, man page, systemd unit (PREFIX, DESTDIR)
#   make docker-test     build the image, run it, probe it, stop it (dockerd)
#   make deploy-test     validate deploy/ offline and run it with podman
#   make fresh-test      the README's make test and make run + POST on a
#                        fresh Debian container with only make (podman):
#                        RELEASE=13 (default) or RELEASE=12
#   make browser-test    the playground page in headless chromium
#   make bench           build/attnd-bench, the numpy peer and the Python
#                        client (attention() vs infer()): one table
#   make http-bench      attnd vs nginx and FastAPI+numpy, batching on/off,
#                        shared memory (wrk)
#   make shm-bench       attnd's CPU per request with tensors in shared memory
#   make budget-bench    attnd's CPU per request / the in-process core's
#   make bench-peers     the core vs ONNX Runtime and PyTorch SDPA, float32
#                        and BF16, one thread (Debian 13 chroot, as root)
#   make SANITIZE=address,undefined test
#   make fuzz            libFuzzer harnesses, FUZZ_SECONDS each (tests/fuzz)
#   make printer-exhaustive  all 2^32 floats through the JSON printers
#
# Knobs: OPTIMIZATION, SANITIZE, CC, PORT, V=1 for loud compile lines.

CC ?= cc
OPTIMIZATION ?= -O2
PORT ?= 8000
BUILD := build

PKGS := libmicrohttpd libcjson libuv openblas zlib gnutls
STD := -std=c11 -D_GNU_SOURCE
WARN := -Wall -Wextra -Wno-missing-field-initializers -Wstrict-prototypes \
        -Wshadow -Wpointer-arith -Werror=implicit-function-declaration
DEBUG := -g
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)

ifneq ($(SANITIZE),)
SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
OPTIMIZATION := -O1
endif

FINAL_CFLAGS = $(STD) $(WARN) $(OPTIMIZATION) $(DEBUG) $(SAN_FLAGS) \
               $(PKG_CFLAGS) -I. $(HOOKS) $(CFLAGS) -MMD -MP
FINAL_LDFLAGS = $(SAN_FLAGS) $(LDFLAGS)
# proto/text/fpread.cc and fpprint.cc, the C++ over fast_float and Dragonbox
# (both header only).  Debian installs dragonbox.h under a versioned
# directory, with no pkg-config file.
DRAGONBOX_INC = $(addprefix -I,$(lastword $(sort $(wildcard /usr/include/dragonbox-*))))
FINAL_CXXFLAGS = -std=c++17 -fno-exceptions -fno-rtti -Wall -Wextra \
                 $(OPTIMIZATION) $(DEBUG) $(SAN_FLAGS) -I. $(DRAGONBOX_INC) \
                 $(CXXFLAGS) -MMD -MP
FINAL_LIBS = $(PKG_LIBS) -lstdc++ -lpthread -lm $(LIBS)

ifeq ($(V),1)
Q :=
else
Q := @
endif

CORE_SRC := $(wildcard core/*.c)
PROTO_SRC := $(wildcard proto/*.c proto/*/*.c)
PROTO_CXX_SRC := $(wildcard proto/*/*.cc)
SERVER_SRC := $(filter-out server/main.c,$(wildcard server/*.c server/*/*.c))
LIB_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(CORE_SRC) $(PROTO_SRC) $(SERVER_SRC)) \
           $(patsubst %.cc,$(BUILD)/obj/%.o,$(PROTO_CXX_SRC))
MAIN_OBJ := $(BUILD)/obj/server/main.o
# Test hooks (failure injection, ATTND_FAIL_ALLOC_AT, counters only tests
# read, the decoders' cJSON path on its own, a delayed end of each request,
# a shorter wait before the accept thread writes connections off)
# exist in the test build alone: the unit tests and build/attnd-test
# link these files compiled with -DATTND_TEST_HOOKS (in build/obj-test);
# build/attnd has none of them.
HOOKED_SRC := proto/mem.c proto/text/numscan.c server/shm/fault.c server/http/http.c \
              server/conn/acceptor.c
HOOKED_OBJ := $(patsubst %.c,$(BUILD)/obj-test/%.o,$(HOOKED_SRC))
TEST_LIB_OBJ := $(filter-out $(patsubst %.c,$(BUILD)/obj/%.o,$(HOOKED_SRC)),\
                  $(LIB_OBJ)) $(HOOKED_OBJ)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
TEST_SUPPORT_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/unit/support_*.c))

all: $(BUILD)/attnd

# The core's inner loops (softmax, scaling, masking) are written to be
# auto-vectorized; -O3 lets gcc do it.  Sanitizer builds keep -O1.
ifeq ($(SANITIZE),)
$(BUILD)/obj/core/%.o: OPTIMIZATION := -O3
endif

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@[ "$(V)" = 1 ] || echo "  CC    $<"
	$(Q)$(CC) $(FINAL_CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	@[ "$(V)" = 1 ] || echo "  CXX   $<"
	$(Q)$(CXX) $(FINAL_CXXFLAGS) -c $< -o $@

# assets.o embeds server/http/static/ and deploy/openapi.json with .incbin,
# which -MMD cannot see.
$(BUILD)/obj/server/http/assets.o: $(wildcard server/http/static/*) deploy/openapi.json

$(BUILD)/libattnd.a: $(LIB_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/attnd: $(MAIN_OBJ) $(BUILD)/libattnd.a
	@[ "$(V)" = 1 ] || echo "  LINK  $@"
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $^ $(FINAL_LIBS)

# The test build: the hooked files, the tests' own objects (which see the
# hooks' declarations), a library and an attnd with the hooks.
$(BUILD)/obj-test/%.o: HOOKS := -DATTND_TEST_HOOKS
$(BUILD)/obj/tests/%.o: HOOKS := -DATTND_TEST_HOOKS
$(BUILD)/obj-test/%.o: %.c
	@mkdir -p $(dir $@)
	@[ "$(V)" = 1 ] || echo "  CC    $< (test hooks)"
	$(Q)$(CC) $(FINAL_CFLAGS) -c $< -o $@

$(BUILD)/libattnd-test.a: $(TEST_LIB_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/attnd-test: $(BUILD)/obj-test/server/main.o $(BUILD)/libattnd-test.a
	@[ "$(V)" = 1 ] || echo "  LINK  $@"
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $^ $(FINAL_LIBS)

# test_cost counts the scores and projections the core computes by
# standing between the paths and attn__scores.
$(BUILD)/tests/test_cost: UNIT_LDFLAGS := -Wl,--wrap=attn__scores

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TEST_SUPPORT_OBJ) $(BUILD)/libattnd-test.a
	@mkdir -p $(dir $@)
	@[ "$(V)" = 1 ] || echo "  LINK  $@"
	$(Q)$(CC) $(FINAL_LDFLAGS) $(UNIT_LDFLAGS) -o $@ $^ $(FINAL_LIBS) $(CHECK_LIBS)

unit: $(UNIT_BIN) $(BUILD)/attnd-test

# Installs the Debian packages attnd needs to build, run and test when we are
# root; otherwise prints the apt-get line to run.
deps:
	@sh tests/deps.sh

run: deps
	@$(MAKE) --no-print-directory all
	./$(BUILD)/attnd --port $(PORT)

# The Python client in a virtual environment at $(VENV) that sees Debian's
# numpy; pip builds from a temporary copy, so the tree stays as it was
# (deploy/clients/python/venv.sh).  Works as root and as any user.
VENV ?= .venv
venv:
	@sh deploy/clients/python/venv.sh $(VENV)

# deps first, then a fresh make: pkg-config and clang are looked up at parse
# time, so a make that has just installed them must read the Makefile again.
test: deps
	@$(MAKE) --no-print-directory all unit fuzz-if-clang
	@sh tests/run.sh

valgrind: deps-check all unit
	@ATTND_VALGRIND=1 sh tests/run.sh

deps-check:
	@sh tests/deps.sh --check

# The binary, attnd(1) and the systemd unit, its ExecStart pointed at the
# installed binary.  PREFIX=/usr for a distribution layout; DESTDIR stages
# the tree for a package.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(UNITDIR)
	install -m 0755 $(BUILD)/attnd $(DESTDIR)$(BINDIR)/attnd
	install -m 0644 deploy/attnd.1 $(DESTDIR)$(MANDIR)/man1/attnd.1
	sed 's|^ExecStart=.*|ExecStart=$(BINDIR)/attnd|' deploy/systemd/attnd.service \
	  > $(DESTDIR)$(UNITDIR)/attnd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/attnd.service

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/attnd $(DESTDIR)$(MANDIR)/man1/attnd.1 \
	  $(DESTDIR)$(UNITDIR)/attnd.service

.PHONY: install uninstall

# Container and deployment checks (installs docker.io, podman, prometheus,
# node packages as needed; see tests/deploy/).
docker-test: all
	@sh tests/deploy/docker_test.sh

deploy-test: all
	@sh tests/deploy/manifests_test.sh

# The README's two commands, each alone and in both orders, as root on
# new containers of Debian $(RELEASE) (13 or 12) with nothing but make and
# the default capabilities (tests/fresh/run.sh).  The containers build
# from `git archive HEAD`, so nothing is built here.
RELEASE ?= 13
fresh-test:
	@RELEASE=$(RELEASE) sh tests/fresh/run.sh

# The playground in headless Debian chromium driven by playwright-core.
browser-test: all
	@sh tests/browser/run.sh

# Benchmarks (tests/bench/run.sh prints one table of figures and ratios).
# core/ only, and server/amx.c for AMX's permission, so that work in
# progress elsewhere cannot stop a benchmark.
$(BUILD)/attnd-bench: $(BUILD)/obj/tests/bench/bench_core.o \
                      $(BUILD)/obj/tests/bench/bench_modes.o \
                      $(BUILD)/obj/server/amx.o \
                      $(patsubst %.c,$(BUILD)/obj/%.o,$(CORE_SRC))
	@[ "$(V)" = 1 ] || echo "  LINK  $@"
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $^ $(FINAL_LIBS)

bench: all $(BUILD)/attnd-bench $(BUILD)/attnd-bench-json
	@sh tests/bench/run.sh
	@./$(BUILD)/attnd-bench-json
	@python3 tests/bench/cancel_bench.py
	@$(MAKE) --no-print-directory http-bench
	@$(MAKE) --no-print-directory budget-bench

# The HTTP benchmarks (tests/load/): attnd against nginx and a FastAPI +
# numpy peer (table, ratios, docs/bench-http.png), then batching on and
# off.  wrk, nginx, gnuplot and the peer's packages come from Debian.
http-bench: all
	@sh tests/load/bench_http.sh
	@sh tests/load/bench_batching.sh
	@sh tests/load/bench_shm.sh

# A same-host client passing its tensors through shared memory: attnd's
# CPU time per request against the in-process core's per call.
shm-bench: all
	@sh tests/load/bench_shm.sh

# attnd's CPU per request against the in-process core's, for a same-host
# client: shared memory, TCP and the Unix socket (tests/load/budget.py).
budget-bench: all
	@sh tests/load/bench_budget.sh

-include $(BUILD)/obj/tests/bench/bench_core.d \
         $(BUILD)/obj/tests/bench/bench_modes.d

# The core beside ONNX Runtime's MultiHeadAttention and PyTorch's
# scaled_dot_product_attention from Debian 13, float32 and BF16, one thread
# each, CPU time (tests/bench/peers.sh): a Debian 13 chroot, cached, builds
# its own attnd-bench in build/trixie.
bench-peers:
	@sh tests/bench/peers.sh

# The JSON number path (tests/bench/bench_json.c): decode and encode,
# numscan against the cJSON path (through the test build's hook, hence
# libattnd-test.a) and the simdjson peer
# (tests/bench/bench_simdjson.cc) in the same run.  simdjson is the
# benchmark's package only: bench-deps installs it, make test never
# needs it.
SIMDJSON_CFLAGS = $(shell pkg-config --cflags simdjson 2>/dev/null)
SIMDJSON_LIBS = $(or $(shell pkg-config --libs simdjson 2>/dev/null),-lsimdjson)
$(BUILD)/obj/tests/bench/bench_simdjson.o: CXXFLAGS += $(SIMDJSON_CFLAGS)
$(BUILD)/obj/tests/bench/bench_simdjson.o: | bench-deps

bench-deps:
	@sh tests/bench/deps.sh

$(BUILD)/attnd-bench-json: $(BUILD)/obj/tests/bench/bench_json.o \
                           $(BUILD)/obj/tests/bench/bench_simdjson.o \
                           $(BUILD)/libattnd-test.a
	@[ "$(V)" = 1 ] || echo "  LINK  $@"
	$(Q)$(CC) $(FINAL_LDFLAGS) -o $@ $^ $(FINAL_LIBS) $(SIMDJSON_LIBS)

-include $(BUILD)/obj/tests/bench/bench_json.d \
         $(BUILD)/obj/tests/bench/bench_simdjson.d

# Every float32 bit pattern through every list printer this CPU has
# (8, 4 and 1 at a time), against Dragonbox's to_decimal and a read-back
# (tests/exhaustive/printer_exhaustive.cc), on all cores.
$(BUILD)/obj/tests/exhaustive/printer_exhaustive.o: CXXFLAGS += -pthread
$(BUILD)/printer-exhaustive: $(BUILD)/obj/tests/exhaustive/printer_exhaustive.o \
                             $(BUILD)/libattnd.a
	@[ "$(V)" = 1 ] || echo "  LINK  $@"
	$(Q)$(CXX) $(FINAL_LDFLAGS) -pthread -o $@ $^ $(FINAL_LIBS)

printer-exhaustive: $(BUILD)/printer-exhaustive
	./$(BUILD)/printer-exhaustive

-include $(BUILD)/obj/tests/exhaustive/printer_exhaustive.d

# libFuzzer harnesses (tests/fuzz/): proto/, core/ and the shared memory
# registry rebuilt with clang, -fsanitize=fuzzer,address,undefined, in
# build/fuzz.  `make fuzz` runs each harness FUZZ_SECONDS on a copy of its
# seed corpus; make test runs them for 3 s each (tests/run.sh).  Without
# clang the suite is skipped.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all \
            -fno-omit-frame-pointer
FUZZ_CFLAGS = $(STD) $(WARN) -O1 -g $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
              $(PKG_CFLAGS) -I. -MMD -MP
FUZZ_CXX ?= clang++
# The shared memory registry too: fuzz_v2 decodes through real regions.
FUZZ_SERVER_SRC := server/shm/shm.c server/shm/shm_http.c server/shm/fault.c
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(CORE_SRC) $(PROTO_SRC) \
                  $(FUZZ_SERVER_SRC)) \
                $(patsubst %.cc,$(FUZZ_DIR)/obj/%.o,$(PROTO_CXX_SRC))
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(FUZZ_DIR)/%,\
              $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_MAIN_OBJ := $(FUZZ_BIN:$(FUZZ_DIR)/%=$(FUZZ_DIR)/obj/tests/fuzz/%.o)
FUZZ_AVAILABLE := $(shell command -v $(FUZZ_CC) >/dev/null 2>&1 && echo 1)
.SECONDARY: $(FUZZ_LIB_OBJ) $(FUZZ_MAIN_OBJ)

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@[ "$(V)" = 1 ] || echo "  FUZZCC $<"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_DIR)/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	@[ "$(V)" = 1 ] || echo "  FUZZCXX $<"
	$(Q)$(FUZZ_CXX) -std=c++17 -fno-exceptions -fno-rtti -O1 -g $(FUZZ_SAN) \
	  -fsanitize=fuzzer-no-link -I. $(DRAGONBOX_INC) -MMD -MP -c $< -o $@

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o $(FUZZ_LIB_OBJ)
	@[ "$(V)" = 1 ] || echo "  LINK  $@"
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(PKG_LIBS) \
	  -lstdc++ -lpthread -lm

fuzz-build: $(FUZZ_BIN)

# What make test builds: the harnesses, unless clang is missing (then
# tests/fuzz/run.sh says it skipped them).
fuzz-if-clang: $(if $(FUZZ_AVAILABLE),fuzz-build)

fuzz: fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run.sh

-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_MAIN_OBJ:.o=.d)

clean:
	rm -rf $(BUILD)

.PHONY: all unit deps run venv test valgrind deps-check clean docker-test deploy-test fresh-test browser-test bench bench-deps printer-exhaustive fuzz fuzz-build fuzz-if-clang http-bench budget-bench shm-bench bench-peers

-include $(LIB_OBJ:.o=.d) $(MAIN_OBJ:.o=.d) $(HOOKED_OBJ:.o=.d) \
         $(BUILD)/obj-test/server/main.d $(patsubst %,$(BUILD)/obj/tests/unit/%.d,$(notdir $(UNIT_BIN)))
