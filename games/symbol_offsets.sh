#!/bin/sh
# symbol_offsets.sh: what a user does with a tool to find a closed game's state, done
# by the build. Given the game built twice from one source, once stripped (what ships)
# and once not (beside it, never run), it checks that both have the same sections at
# the same addresses (stripping drops only the symbol table), then writes each named
# symbol's offset from the image base as a recipe address ([games.inject]
# addresses_file): name = "exe+0xOFFSET".
#
#   symbol_offsets.sh STRIPPED UNSTRIPPED NM OBJDUMP name=symbol... > out.toml
#
# Fails (exit 1, one line on stderr) when a symbol is missing or the layouts differ:
# then the offsets would not be the shipped game's.
set -eu
stripped=$1 unstripped=$2 nm=$3 objdump=$4
shift 4
# Sizes and addresses only: the stripped file loses the long section names (.eh_frame -> .eh_fram).
layout() { "$objdump" -h "$1" | awk '$1 ~ /^[0-9]+$/ && $2 !~ /^[.]debug/ { print $3, $4 }'; }
if [ "$(layout "$stripped")" != "$(layout "$unstripped")" ]; then
    echo "symbol_offsets.sh: $stripped and $unstripped have different sections (built from different sources or flags?)" >&2
    exit 1
fi
base=$("$objdump" -p "$unstripped" | awk '$1 == "ImageBase" { print $2 }')
echo "# Written by games/symbol_offsets.sh from $(basename "$unstripped") (nm); the offsets from the image base."
for pair in "$@"; do
    name=${pair%%=*} sym=${pair#*=}
    # i686 symbols carry a leading underscore.
    addr=$("$nm" "$unstripped" | awk -v s="$sym" '($3 == s || $3 == "_" s) && $2 ~ /^[bBdD]$/ { print $1; exit }')
    if [ -z "$addr" ]; then
        echo "symbol_offsets.sh: $unstripped has no data symbol $sym" >&2
        exit 1
    fi
    printf '%s = "exe+0x%x"\n' "$name" $((0x$addr - 0x$base))
done
