# kvix: build, check, install, sanitizers, bench.
#
#   make                      the libraries (libkvix.a, libkvix-net.a, the tools' own
#                             libkvix-tools.a) and every tool in build/bin
#   make check                install missing packages, then every test: -Werror build,
#                             ASan+UBSan, TSan (tests/check.sh prints "N passed, N failed")
#   make demo                 the main job on the bundled example
#   make bench                benchmarks; figures in bench/RESULTS.md
#   make fuzz                 the libFuzzer targets (clang), FUZZ_SECONDS each (default 60)
#   make SANITIZE=address,undefined   instrumented build in build/asan
#   make SANITIZE=thread              instrumented build in build/tsan
#   make install PREFIX=/usr/local DESTDIR=   tools, man pages, completions, libkvix and
#                             libkvix-net (static, and shared with sonames libkvix.so.$(SOVERSION)
#                             and libkvix-net.so.$(SOVERSION)), headers, kvix.pc and kvix-net.pc,
#                             the systemd unit (SYSTEMDUNITDIR), the python package (PYTHONDIR)

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
# The systemd unit (contrib/kvindex.service.in with these paths); /etc for PREFIX=/usr
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
# The python package where Debian's python3 finds it: /usr/lib/python3/dist-packages
# for PREFIX=/usr, $(PREFIX)/lib/python3.X/dist-packages otherwise (/usr/local's is on
# Debian's sys.path)
PYTHON ?= /usr/bin/python3
PYTHONDIR ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/python3/dist-packages,$(PREFIX)/lib/python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo 3)/dist-packages)

CC ?= cc
VERSION := 0.1.0
SOVERSION := 0
PKGS := libxxhash jansson msgpack libzmq liburcu liblzma libzstd zlib libnats libmicrohttpd libcurl
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

OPT ?= -O2
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith \
        -Wformat=2 -Wundef -Wcast-align -Wwrite-strings -Wno-format-nonliteral
ifeq ($(WERROR),1)
WARN += -Werror
endif

ifeq ($(SANITIZE),)
BUILD ?= build
SANFLAGS :=
else ifeq ($(SANITIZE),thread)
BUILD ?= build/tsan
SANFLAGS := -fsanitize=thread
else
BUILD ?= build/asan
SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

KVIX_DIRS := lib/core lib/codec lib/index lib/index/backends lib/snapshot
NET_DIRS := lib/net
TOOLS_DIR := cmd/tools
INCLUDES := -Iinclude $(addprefix -I,$(KVIX_DIRS) $(NET_DIRS) $(TOOLS_DIR))

CFLAGS ?= $(OPT) -g
ALL_CFLAGS := -std=gnu11 -pthread $(INCLUDES) $(WARN) $(SANFLAGS) $(PKG_CFLAGS) $(CFLAGS)
ALL_LDFLAGS := -pthread $(SANFLAGS) $(LDFLAGS)
LIBS := $(PKG_LIBS) -lm

# The library in layers, each using only those below it (lib/README.md):
# libkvix is what a router embeds (core, codec, index, snapshot), libkvix-net
# the engine subscriber and publisher, NATS, peers and the HTTP service; the
# tools' own machinery (cmd/tools) is a static library that is not installed.
KVIX_SRC := $(foreach d,$(KVIX_DIRS),$(wildcard $(d)/*.c))
NET_SRC := $(foreach d,$(NET_DIRS),$(wildcard $(d)/*.c))
LIB_SRC := $(KVIX_SRC) $(NET_SRC)
KVIX_OBJ := $(KVIX_SRC:%.c=$(BUILD)/obj/%.o)
NET_OBJ := $(NET_SRC:%.c=$(BUILD)/obj/%.o)
TOOLS_LIB_SRC := $(wildcard $(TOOLS_DIR)/*.c)
TOOLS_LIB_OBJ := $(TOOLS_LIB_SRC:%.c=$(BUILD)/obj/%.o)
# cmd/TOOL.c is a tool, one file each
TOOL_SRC := $(wildcard cmd/*.c)
TOOLS := $(TOOL_SRC:cmd/%.c=$(BUILD)/bin/%)
KVINDEX_OBJ = $(BUILD)/obj/cmd/kvindex.o
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
UNIT_SUPPORT := $(filter-out $(UNIT_SRC),$(wildcard tests/unit/*.c))
UNIT_SUPPORT_OBJ := $(UNIT_SUPPORT:%.c=$(BUILD)/obj/%.o)
# bench/kvbench_PART.c are parts of kvbench (bench/kvbench.h), not benchmarks
KVBENCH_PART_SRC := $(wildcard bench/kvbench_*.c)
KVBENCH_PART_OBJ := $(KVBENCH_PART_SRC:%.c=$(BUILD)/obj/%.o)
BENCH_SRC := $(filter-out $(KVBENCH_PART_SRC),$(wildcard bench/*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
LIBKVIX := $(BUILD)/libkvix.a
LIBKVIX_NET := $(BUILD)/libkvix-net.a
LIBKVIX_TOOLS := $(BUILD)/libkvix-tools.a
# What every program of the tree links, in link order.
ALL_LIBS := $(LIBKVIX_TOOLS) $(LIBKVIX_NET) $(LIBKVIX)
# The shared libraries have objects of their own (-fPIC): the tools keep linking
# the static ones, built without it, and only `make shared` or `make install` pay.
KVIX_PIC_OBJ := $(KVIX_SRC:%.c=$(BUILD)/pic/%.o)
NET_PIC_OBJ := $(NET_SRC:%.c=$(BUILD)/pic/%.o)
LIBKVIX_SO := $(BUILD)/libkvix.so.$(VERSION)
LIBKVIX_NET_SO := $(BUILD)/libkvix-net.so.$(VERSION)
SONAME := libkvix.so.$(SOVERSION)
NET_SONAME := libkvix-net.so.$(SOVERSION)
KVIX_PKGS := libxxhash jansson msgpack liburcu
NET_PKGS := libzmq libnats libmicrohttpd libcurl
KVIX_LIBS := $(shell pkg-config --libs $(KVIX_PKGS) 2>/dev/null) -pthread -lm
NET_LIBS := $(shell pkg-config --libs $(NET_PKGS) 2>/dev/null)

.PHONY: all tools tests benches shared check demo bench deps install uninstall clean
all: $(ALL_LIBS) $(TOOLS)
shared: $(LIBKVIX_SO) $(LIBKVIX_NET_SO)
tools: $(TOOLS)
# kvindex with every allocation of kvix's code made to fail on demand (tests only)
FAILALLOC := $(BUILD)/tests/kvindex_failalloc
# a getaddrinfo held at a gate (tests/dnsgate), preloaded by tests: built
# without sanitizers, as the system's libraries are
DNSGATE := $(BUILD)/tests/libdnsgate.so
tests: all $(UNIT_BIN) $(FAILALLOC) $(DNSGATE)
benches: all $(BENCH_BIN)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(LIBKVIX): $(KVIX_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBKVIX_NET): $(NET_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBKVIX_TOOLS): $(TOOLS_LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fPIC -MMD -MP -c -o $@ $<

# Only the public API is exported: the kvix_ names the public headers declare
# (lib/exports.sh writes the version script); the library's private helpers,
# kvix_ named or not, and its dependencies' symbols stay inside.
$(BUILD)/kvix.map: $(KVIX_PIC_OBJ) $(wildcard include/kvix/*.h) lib/exports.sh
	sh lib/exports.sh include $(KVIX_PIC_OBJ) >$@.tmp && mv $@.tmp $@

$(BUILD)/kvix-net.map: $(NET_PIC_OBJ) $(wildcard include/kvix/*.h) lib/exports.sh
	sh lib/exports.sh include $(NET_PIC_OBJ) >$@.tmp && mv $@.tmp $@

# --no-undefined: libkvix must stand without libkvix-net (a router links it alone)
$(LIBKVIX_SO): $(KVIX_PIC_OBJ) $(BUILD)/kvix.map
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=$(BUILD)/kvix.map \
	    -Wl,--no-undefined -o $@ $(KVIX_PIC_OBJ) $(KVIX_LIBS)

# NET_SHARES: private helpers of libkvix that the service also uses, linked
# into libkvix-net as hidden copies (libkvix does not export them).
NET_SHARES := $(BUILD)/pic/lib/core/hashmap.o $(BUILD)/pic/lib/codec/json_arena.o \
    $(BUILD)/pic/lib/codec/json_text.o
$(LIBKVIX_NET_SO): $(NET_PIC_OBJ) $(NET_SHARES) $(BUILD)/kvix-net.map $(LIBKVIX_SO)
	$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(NET_SONAME) \
	    -Wl,--version-script=$(BUILD)/kvix-net.map -Wl,--no-undefined \
	    -o $@ $(NET_PIC_OBJ) $(NET_SHARES) $(LIBKVIX_SO) $(NET_LIBS) $(KVIX_LIBS)

$(BUILD)/bin/%: $(BUILD)/obj/cmd/%.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(ALL_LIBS) $(LIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(UNIT_SUPPORT_OBJ) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(UNIT_SUPPORT_OBJ) $(ALL_LIBS) $(LIBS)

$(DNSGATE): tests/dnsgate/dnsgate.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $< -ldl

$(FAILALLOC): $(KVINDEX_OBJ) $(BUILD)/obj/tests/failalloc/failalloc.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc -o $@ \
	    $(KVINDEX_OBJ) $(BUILD)/obj/tests/failalloc/failalloc.o $(ALL_LIBS) $(LIBS)

# benches parse their numbers with the tools' checked parsers (cmd/tools/cli.h)
$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(ALL_LIBS) $(LIBS)

$(BUILD)/bench/kvbench: $(BUILD)/obj/bench/kvbench.o $(KVBENCH_PART_OBJ) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(ALL_LIBS) $(LIBS)

deps:
	@sh .ci/deps

check: deps
	@bash tests/check.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@bash tests/demo.sh

bench: deps
	@$(MAKE) --no-print-directory benches
	@bash bench/run.sh

install: all shared
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man5 \
	    $(DESTDIR)$(MANDIR)/man7 $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/kvix \
	    $(DESTDIR)$(PKGCONFIGDIR) \
	    $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)
	install -m 644 $(wildcard man/*.1) $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(wildcard man/*.3) $(DESTDIR)$(MANDIR)/man3
	install -m 644 $(wildcard man/*.5) $(DESTDIR)$(MANDIR)/man5
	$(if $(wildcard man/*.7),install -m 644 $(wildcard man/*.7) $(DESTDIR)$(MANDIR)/man7)
	install -m 644 $(LIBKVIX) $(LIBKVIX_NET) $(DESTDIR)$(LIBDIR)
	install -m 755 $(LIBKVIX_SO) $(LIBKVIX_NET_SO) $(DESTDIR)$(LIBDIR)
	ln -sf libkvix.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libkvix.so
	ln -sf libkvix-net.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(NET_SONAME)
	ln -sf $(NET_SONAME) $(DESTDIR)$(LIBDIR)/libkvix-net.so
	install -m 644 $(wildcard include/kvix/*.h) $(DESTDIR)$(INCLUDEDIR)/kvix
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
	    'Name: kvix' 'Description: global KV-cache block index: hashing, events, index, snapshots' \
	    'Version: $(VERSION)' 'Requires.private: $(KVIX_PKGS)' \
	    'Libs: -L$${libdir} -lkvix' 'Libs.private: -pthread -lm' 'Cflags: -I$${includedir}' \
	    >$(DESTDIR)$(PKGCONFIGDIR)/kvix.pc
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
	    'Name: kvix-net' 'Description: kvix on the network: engine subscriber and publisher, NATS, peers, HTTP service' \
	    'Version: $(VERSION)' 'Requires: kvix = $(VERSION)' 'Requires.private: $(NET_PKGS)' \
	    'Libs: -L$${libdir} -lkvix-net' 'Cflags: -I$${includedir}' \
	    >$(DESTDIR)$(PKGCONFIGDIR)/kvix-net.pc
	install -d $(DESTDIR)$(SYSTEMDUNITDIR)
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	    -e 's|@UNITDIR@|$(SYSTEMDUNITDIR)|g' contrib/kvindex.service.in \
	    >$(DESTDIR)$(SYSTEMDUNITDIR)/kvindex.service
	install -d $(DESTDIR)$(PYTHONDIR)/kvix
	install -m 644 $(filter-out python/kvix/hashing.py,$(wildcard python/kvix/*.py)) \
	    $(DESTDIR)$(PYTHONDIR)/kvix
	sed 's|^_INSTALL_LIBDIR = None$$|_INSTALL_LIBDIR = "$(LIBDIR)"|' python/kvix/hashing.py \
	    >$(DESTDIR)$(PYTHONDIR)/kvix/hashing.py
	for f in completions/*.bash; do [ -e "$$f" ] || continue; \
	    install -m 644 $$f $(DESTDIR)$(BASHCOMPDIR)/$$(basename $$f .bash); done
	for f in completions/_*; do [ -e "$$f" ] || continue; \
	    install -m 644 $$f $(DESTDIR)$(ZSHCOMPDIR); done
	for f in completions/*.fish; do [ -e "$$f" ] || continue; \
	    install -m 644 $$f $(DESTDIR)$(FISHCOMPDIR); done

uninstall:
	rm -f $(TOOLS:$(BUILD)/bin/%=$(DESTDIR)$(BINDIR)/%)
	rm -f $(patsubst man/%,$(DESTDIR)$(MANDIR)/man1/%,$(wildcard man/*.1))
	rm -f $(patsubst man/%,$(DESTDIR)$(MANDIR)/man3/%,$(wildcard man/*.3))
	rm -f $(patsubst man/%,$(DESTDIR)$(MANDIR)/man5/%,$(wildcard man/*.5))
	rm -f $(patsubst man/%,$(DESTDIR)$(MANDIR)/man7/%,$(wildcard man/*.7))
	rm -f $(DESTDIR)$(LIBDIR)/libkvix.a $(DESTDIR)$(LIBDIR)/libkvix.so.$(VERSION) \
	    $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libkvix.so $(DESTDIR)$(PKGCONFIGDIR)/kvix.pc
	rm -f $(DESTDIR)$(LIBDIR)/libkvix-net.a $(DESTDIR)$(LIBDIR)/libkvix-net.so.$(VERSION) \
	    $(DESTDIR)$(LIBDIR)/$(NET_SONAME) $(DESTDIR)$(LIBDIR)/libkvix-net.so \
	    $(DESTDIR)$(PKGCONFIGDIR)/kvix-net.pc
	rm -f $(patsubst include/kvix/%,$(DESTDIR)$(INCLUDEDIR)/kvix/%,$(wildcard include/kvix/*.h))
	rm -f $(patsubst completions/%.bash,$(DESTDIR)$(BASHCOMPDIR)/%,$(wildcard completions/*.bash))
	rm -f $(patsubst completions/%,$(DESTDIR)$(ZSHCOMPDIR)/%,$(wildcard completions/_*))
	rm -f $(patsubst completions/%,$(DESTDIR)$(FISHCOMPDIR)/%,$(wildcard completions/*.fish))
	rm -rf $(DESTDIR)$(PYTHONDIR)/kvix
	rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/kvindex.service

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj $(BUILD)/pic -name '*.d' 2>/dev/null)

# Objects are never deleted as intermediates: `make` then `make demo` (or
# any second make) must find the tools up to date, not rebuild them all.
.SECONDARY:

# The fuzz targets (clang's libFuzzer): tests/fuzz/run.sh [SECONDS-EACH] [TARGET...]
.PHONY: fuzz
fuzz:
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS)

.PHONY: print-build
print-build:
	@echo $(BUILD)
