/* pe.h: the few facts about a PE file the launcher checks before it injects a DLL,
 * read from the file (not loaded): is it a PE file, for which machine, a DLL or not,
 * which exports it has and which DLLs it imports. Enough to turn "LoadLibrary
 * failed" into "duel_adapter.dll is a 32-bit DLL and the game is 64-bit". */
#ifndef W3H_PE_H
#define W3H_PE_H

#include <stddef.h>
#include <stdint.h>

#define PE_MAX_NAMES 256

typedef struct pe_info {
    uint16_t machine; /* IMAGE_FILE_MACHINE_AMD64 0x8664, I386 0x14c */
    int is_dll;
    int n_exports, n_imports;
    char exports[PE_MAX_NAMES][64]; /* exported names (the first PE_MAX_NAMES) */
    char imports[64][64];           /* imported DLL names */
} pe_info;

/* Reads path's headers, export and import directories. 0, or -1 with err naming the
 * file and what is wrong with it (missing, not a PE file, truncated). */
int pe_read(const wchar_t *path, pe_info *out, char *err, size_t errlen);
int pe_exports(const pe_info *pe, const char *name);
const char *pe_machine_name(uint16_t machine);

#endif
