# The build of a small windowed GDI reference game and its adapter, shared by games/pong and
# games/snake. The including Makefile sets GAME (its folder's name: $(GAME).c is the game,
# adapter/$(GAME)_adapter.c its adapter). Built with mingw-w64 into $(BUILD)/win64/ (and
# $(BUILD)/win32/ where i686 mingw exists):
#   $(GAME).exe             the game, stripped (-s), as a user's game ships
#   $(GAME)_syms.exe        the same build unstripped: only nm reads it, to find the state
#   $(GAME).addresses.toml  the state's offset in $(GAME).exe (games/symbol_offsets.sh)
#   $(GAME)_adapter.dll     the adapter
# GAME_LIBS: the game's libraries (default GDI's; march: Direct3D 9 and DirectInput 8).
BUILD ?= ../../build
GAME_LIBS ?= -lgdi32
MINGW ?= x86_64-w64-mingw32-gcc
MINGW32 ?= i686-w64-mingw32-gcc
GAME_CFLAGS := -O2 -Wall -Wextra -Werror=implicit-function-declaration -mwindows
AD_CFLAGS := -O2 -g -Wall -Wextra -Werror=implicit-function-declaration
SHIM := ../../shim
HAVE_MINGW := $(shell command -v $(MINGW) 2>/dev/null)
HAVE_MINGW32 := $(shell command -v $(MINGW32) 2>/dev/null)

all: $(if $(HAVE_MINGW),win64,nowin) $(if $(HAVE_MINGW32),win32)
nowin:
	@echo "$(GAME): $(MINGW) not found: $(GAME).exe not built (apt-get install gcc-mingw-w64-x86-64)"

# $(1) the compiler, $(2) the folder.
define GDI_GAME_RULES
$(2)/$(GAME).exe: $(GAME).c Makefile ../gdi_game.mk
	@mkdir -p $$(@D)
	$(1) $$(GAME_CFLAGS) -s -o $$@ $(GAME).c $$(GAME_LIBS)

$(2)/$(GAME)_syms.exe: $(GAME).c Makefile ../gdi_game.mk
	@mkdir -p $$(@D)
	$(1) $$(GAME_CFLAGS) -o $$@ $(GAME).c $$(GAME_LIBS)

$(2)/$(GAME).addresses.toml: $(2)/$(GAME).exe $(2)/$(GAME)_syms.exe ../symbol_offsets.sh
	../symbol_offsets.sh $(2)/$(GAME).exe $(2)/$(GAME)_syms.exe $(1:gcc=nm) $(1:gcc=objdump) state=$(GAME) > $$@.tmp
	mv $$@.tmp $$@

$(2)/$(GAME)_adapter.dll: adapter/$(GAME)_adapter.c $(SHIM)/inject/w3h.h $(SHIM)/inject/w3a_kit.h $(SHIM)/w3s_table.h Makefile ../gdi_game.mk
	@mkdir -p $$(@D)
	$(1) $$(AD_CFLAGS) -I$(SHIM) -shared -static -o $$@ adapter/$(GAME)_adapter.c -luser32
endef
$(eval $(call GDI_GAME_RULES,$(MINGW),$(BUILD)/win64))
$(eval $(call GDI_GAME_RULES,$(MINGW32),$(BUILD)/win32))

PARTS := $(GAME).exe $(GAME)_syms.exe $(GAME).addresses.toml $(GAME)_adapter.dll
win64: $(addprefix $(BUILD)/win64/,$(PARTS))
win32: $(addprefix $(BUILD)/win32/,$(PARTS))

.PHONY: all nowin win64 win32
