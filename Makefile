# kvix: build, check, install, sanitizers, bench.
#
#   make                      libkvix.a and every tool in build/bin
#   make check                install missing packages, then every test: -Werror build,
#                             ASan+UBSan, TSan (tests/check.sh prints "N passed, N failed")
#   make demo                 the main job on the bundled example
#   make bench                benchmarks; figures in bench/RESULTS.md
#   make fuzz                 the libFuzzer targets (clang), FUZZ_SECONDS each (default 60)
#   make SANITIZE=address,undefined   instrumented build in build/asan
#   make SANITIZE=thread              instrumented build in build/tsan
#   make install PREFIX=/usr/local DESTDIR=   tools, man pages, completions, and libkvix
#                             (static, shared with soname libkvix.so.$(SOVERSION)), headers, kvix.pc

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d

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

CFLAGS ?= $(OPT) -g
ALL_CFLAGS := -std=gnu11 -pthread -Iinclude -Ilib $(WARN) $(SANFLAGS) $(PKG_CFLAGS) $(CFLAGS)
ALL_LDFLAGS := -pthread $(SANFLAGS) $(LDFLAGS)
LIBS := $(PKG_LIBS) -lm

LIB_SRC := $(wildcard lib/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_SRC := $(wildcard cmd/cli*.c)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
# cmd/TOOL.c is a tool, one file each (its logic lives in lib/)
TOOL_SRC := $(filter-out $(CLI_SRC),$(wildcard cmd/*.c))
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
# The shared library has objects of its own (-fPIC): the tools keep linking the
# static one, built without it, and only `make shared` or `make install` pay for it.
LIB_PIC_OBJ := $(LIB_SRC:%.c=$(BUILD)/pic/%.o)
LIBKVIX_SO := $(BUILD)/libkvix.so.$(VERSION)
SONAME := libkvix.so.$(SOVERSION)
PKG_REQUIRES := $(PKGS)

.PHONY: all tools tests benches shared check demo bench deps install uninstall clean
all: $(LIBKVIX) $(TOOLS)
shared: $(LIBKVIX_SO)
tools: $(TOOLS)
# kvindex with every allocation of kvix's code made to fail on demand (tests only)
FAILALLOC := $(BUILD)/tests/kvindex_failalloc
tests: all $(UNIT_BIN) $(FAILALLOC)
benches: all $(BENCH_BIN)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(LIBKVIX): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fPIC -MMD -MP -c -o $@ $<

# Only the public API is exported: the kvix_ names the public headers declare
# (lib/exports.sh writes the version script); the library's private helpers,
# kvix_ named or not, and its dependencies' symbols stay inside.
$(BUILD)/kvix.map: $(LIB_PIC_OBJ) $(wildcard include/kvix/*.h) lib/exports.sh
	sh lib/exports.sh include $(LIB_PIC_OBJ) >$@.tmp && mv $@.tmp $@

$(LIBKVIX_SO): $(LIB_PIC_OBJ) $(BUILD)/kvix.map
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=$(BUILD)/kvix.map \
	    -o $@ $(LIB_PIC_OBJ) $(LIBS)

$(BUILD)/bin/%: $(BUILD)/obj/cmd/%.o $(CLI_OBJ) $(LIBKVIX)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIBKVIX) $(LIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(UNIT_SUPPORT_OBJ) $(LIBKVIX)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(UNIT_SUPPORT_OBJ) $(LIBKVIX) $(LIBS)

$(FAILALLOC): $(KVINDEX_OBJ) $(BUILD)/obj/tests/failalloc/failalloc.o $(CLI_OBJ) $(LIBKVIX)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc -o $@ \
	    $(KVINDEX_OBJ) $(BUILD)/obj/tests/failalloc/failalloc.o $(CLI_OBJ) \
	    $(LIBKVIX) $(LIBS)

# benches parse their numbers with the tools' checked parsers (cmd/cli.h)
$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(CLI_OBJ) $(LIBKVIX)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $< $(CLI_OBJ) $(LIBKVIX) $(LIBS)

$(BUILD)/bench/kvbench: $(BUILD)/obj/bench/kvbench.o $(KVBENCH_PART_OBJ) $(CLI_OBJ) $(LIBKVIX)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIBKVIX) $(LIBS)

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
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
	    $(DESTDIR)$(MANDIR)/man7 $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/kvix \
	    $(DESTDIR)$(PKGCONFIGDIR) \
	    $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)
	install -m 644 $(wildcard man/*.1) $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(wildcard man/*.5) $(DESTDIR)$(MANDIR)/man5
	$(if $(wildcard man/*.7),install -m 644 $(wildcard man/*.7) $(DESTDIR)$(MANDIR)/man7)
	install -m 644 $(LIBKVIX) $(DESTDIR)$(LIBDIR)
	install -m 755 $(LIBKVIX_SO) $(DESTDIR)$(LIBDIR)
	ln -sf libkvix.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libkvix.so
	install -m 644 $(wildcard include/kvix/*.h) $(DESTDIR)$(INCLUDEDIR)/kvix
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
	    'Name: kvix' 'Description: global KV-cache block index: hashing, events, index, snapshots' \
	    'Version: $(VERSION)' 'Requires.private: $(PKG_REQUIRES)' \
	    'Libs: -L$${libdir} -lkvix' 'Libs.private: -pthread -lm' 'Cflags: -I$${includedir}' \
	    >$(DESTDIR)$(PKGCONFIGDIR)/kvix.pc
	for f in completions/*.bash; do [ -e "$$f" ] || continue; \
	    install -m 644 $$f $(DESTDIR)$(BASHCOMPDIR)/$$(basename $$f .bash); done
	for f in completions/_*; do [ -e "$$f" ] || continue; \
	    install -m 644 $$f $(DESTDIR)$(ZSHCOMPDIR); done
	for f in completions/*.fish; do [ -e "$$f" ] || continue; \
	    install -m 644 $$f $(DESTDIR)$(FISHCOMPDIR); done

uninstall:
	rm -f $(TOOLS:$(BUILD)/bin/%=$(DESTDIR)$(BINDIR)/%)
	rm -f $(patsubst man/%,$(DESTDIR)$(MANDIR)/man1/%,$(wildcard man/*.1))
	rm -f $(patsubst man/%,$(DESTDIR)$(MANDIR)/man5/%,$(wildcard man/*.5))
	rm -f $(patsubst man/%,$(DESTDIR)$(MANDIR)/man7/%,$(wildcard man/*.7))
	rm -f $(DESTDIR)$(LIBDIR)/libkvix.a $(DESTDIR)$(LIBDIR)/libkvix.so.$(VERSION) \
	    $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libkvix.so $(DESTDIR)$(PKGCONFIGDIR)/kvix.pc
	rm -f $(patsubst include/kvix/%,$(DESTDIR)$(INCLUDEDIR)/kvix/%,$(wildcard include/kvix/*.h))
	rm -f $(patsubst completions/%.bash,$(DESTDIR)$(BASHCOMPDIR)/%,$(wildcard completions/*.bash))
	rm -f $(patsubst completions/%,$(DESTDIR)$(ZSHCOMPDIR)/%,$(wildcard completions/_*))
	rm -f $(patsubst completions/%,$(DESTDIR)$(FISHCOMPDIR)/%,$(wildcard completions/*.fish))

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
