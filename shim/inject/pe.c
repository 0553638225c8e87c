/* pe.c: see pe.h. Reads the file into memory and walks its headers by hand: the
 * checks must work on a file the loader would refuse. */
#include "pe.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

static void pe_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *pe_machine_name(uint16_t machine)
{
    switch (machine) {
    case IMAGE_FILE_MACHINE_AMD64: return "x86-64 (64-bit)";
    case IMAGE_FILE_MACHINE_I386: return "i386 (32-bit)";
    case 0xaa64: return "ARM64";
    default: return "an unknown machine";
    }
}

/* The file offset of an RVA, through the section table; 0 when no section holds it. */
static size_t pe_offset(const uint8_t *base, size_t size, const IMAGE_SECTION_HEADER *sec, int n, uint32_t rva)
{
    for (int i = 0; i < n; i++) {
        uint32_t va = sec[i].VirtualAddress, len = sec[i].Misc.VirtualSize ? sec[i].Misc.VirtualSize : sec[i].SizeOfRawData;
        if (rva >= va && rva < va + len) {
            size_t off = (size_t)sec[i].PointerToRawData + (rva - va);
            return off < size ? off : 0;
        }
    }
    (void)base;
    return 0;
}

static void pe_copy_name(char *dst, size_t n, const uint8_t *base, size_t size, size_t off)
{
    size_t i = 0;
    for (; i + 1 < n && off + i < size && base[off + i]; i++)
        dst[i] = (char)base[off + i];
    dst[i] = 0;
}

int pe_read(const wchar_t *path, pe_info *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    char name[MAX_PATH * 2];
    WideCharToMultiByte(CP_UTF8, 0, path, -1, name, sizeof(name), NULL, NULL);
    HANDLE f = CreateFileW(path, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING, 0, NULL);
    if (f == INVALID_HANDLE_VALUE) {
        DWORD e = GetLastError();
        pe_errf(err, errlen, "%s: %s (Windows error %lu)", name,
                e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND ? "no such file" : "cannot open", (unsigned long)e);
        return -1;
    }
    LARGE_INTEGER fsize;
    if (!GetFileSizeEx(f, &fsize) || fsize.QuadPart > (256LL << 20)) {
        CloseHandle(f);
        pe_errf(err, errlen, "%s: cannot read its size, or over 256 MB", name);
        return -1;
    }
    size_t size = (size_t)fsize.QuadPart;
    uint8_t *b = malloc(size ? size : 1);
    DWORD got = 0;
    int ok = b && ReadFile(f, b, (DWORD)size, &got, NULL) && got == size;
    CloseHandle(f);
    if (!ok) {
        free(b);
        pe_errf(err, errlen, "%s: cannot read it", name);
        return -1;
    }
    int rc = -1;
    if (size < sizeof(IMAGE_DOS_HEADER) || ((IMAGE_DOS_HEADER *)b)->e_magic != IMAGE_DOS_SIGNATURE) {
        pe_errf(err, errlen, "%s: not a PE file (no MZ header)", name);
        goto out;
    }
    size_t nt = (size_t)((IMAGE_DOS_HEADER *)b)->e_lfanew;
    if (nt + sizeof(IMAGE_NT_HEADERS32) > size || *(uint32_t *)(b + nt) != IMAGE_NT_SIGNATURE) {
        pe_errf(err, errlen, "%s: not a PE file (no PE signature)", name);
        goto out;
    }
    IMAGE_FILE_HEADER *fh = (IMAGE_FILE_HEADER *)(b + nt + 4);
    out->machine = fh->Machine;
    out->is_dll = (fh->Characteristics & IMAGE_FILE_DLL) != 0;
    const uint8_t *opt = b + nt + 4 + sizeof(IMAGE_FILE_HEADER);
    const IMAGE_DATA_DIRECTORY *dirs;
    if (*(uint16_t *)opt == IMAGE_NT_OPTIONAL_HDR64_MAGIC)
        dirs = ((const IMAGE_OPTIONAL_HEADER64 *)opt)->DataDirectory;
    else
        dirs = ((const IMAGE_OPTIONAL_HEADER32 *)opt)->DataDirectory;
    const IMAGE_SECTION_HEADER *sec = (const IMAGE_SECTION_HEADER *)(opt + fh->SizeOfOptionalHeader);
    int nsec = fh->NumberOfSections;
    if ((const uint8_t *)(sec + nsec) > b + size) {
        pe_errf(err, errlen, "%s: truncated PE file (section table)", name);
        goto out;
    }
    size_t eo = dirs[IMAGE_DIRECTORY_ENTRY_EXPORT].Size ? pe_offset(b, size, sec, nsec, dirs[IMAGE_DIRECTORY_ENTRY_EXPORT].VirtualAddress) : 0;
    if (eo && eo + sizeof(IMAGE_EXPORT_DIRECTORY) <= size) {
        const IMAGE_EXPORT_DIRECTORY *ed = (const IMAGE_EXPORT_DIRECTORY *)(b + eo);
        size_t no = pe_offset(b, size, sec, nsec, ed->AddressOfNames);
        for (DWORD i = 0; no && i < ed->NumberOfNames && out->n_exports < PE_MAX_NAMES; i++) {
            if (no + 4 * (i + 1) > size)
                break;
            size_t so = pe_offset(b, size, sec, nsec, ((const uint32_t *)(b + no))[i]);
            if (so)
                pe_copy_name(out->exports[out->n_exports++], sizeof(out->exports[0]), b, size, so);
        }
    }
    size_t io = dirs[IMAGE_DIRECTORY_ENTRY_IMPORT].Size ? pe_offset(b, size, sec, nsec, dirs[IMAGE_DIRECTORY_ENTRY_IMPORT].VirtualAddress) : 0;
    for (; io && io + sizeof(IMAGE_IMPORT_DESCRIPTOR) <= size && out->n_imports < 64; io += sizeof(IMAGE_IMPORT_DESCRIPTOR)) {
        const IMAGE_IMPORT_DESCRIPTOR *d = (const IMAGE_IMPORT_DESCRIPTOR *)(b + io);
        if (!d->Name)
            break;
        size_t so = pe_offset(b, size, sec, nsec, d->Name);
        if (so)
            pe_copy_name(out->imports[out->n_imports++], sizeof(out->imports[0]), b, size, so);
    }
    rc = 0;
out:
    free(b);
    return rc;
}

int pe_exports(const pe_info *pe, const char *name)
{
    for (int i = 0; i < pe->n_exports; i++)
        if (!strcmp(pe->exports[i], name))
            return 1;
    return 0;
}
